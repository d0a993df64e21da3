"""nvcc for another host architecture: the device code of an arm64 (Grace) build, checked here.

nvcc compiles a .cu file's host side with the host compiler (``-ccbin``) against the toolkit's
``targets/<arch>-linux/include``, a folder it finds from its own location. An x86-64 toolkit
has only ``targets/x86_64-linux``; the headers there are the same for every host (they branch
on the compiler's own macros), so a temporary toolkit tree that links to this one, with
``targets/aarch64-linux`` pointing at those headers, lets ``nvcc -ccbin aarch64-linux-gnu-g++``
compile to aarch64 objects. nvcc itself (and its profile) is copied, not linked: it resolves
its folder through the link otherwise. Nothing is linked into a program, so no aarch64
libraries are needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

CROSS_COMPILERS = {"aarch64": "aarch64-linux-gnu-g++"}
_COPIED = ("nvcc", "nvcc.profile")


def cross_compiler(host: str) -> str | None:
    """The host compiler for ``host`` if installed (Debian's g++-aarch64-linux-gnu)."""
    name = CROSS_COMPILERS.get(host)
    return shutil.which(name) if name else None


def cross_toolkit(home: Path, host: str, into: Path) -> Path:
    """A toolkit tree under ``into`` whose nvcc targets ``host``; returns that nvcc."""
    real = home.resolve()
    native = next((p for p in sorted((real / "targets").glob("*-linux")) if p.is_dir()), None)
    if native is None:
        raise FileNotFoundError(f"{real}/targets has no <arch>-linux folder")
    tree = into / "cuda-cross"
    (tree / "bin").mkdir(parents=True)
    for item in (real / "bin").iterdir():
        target = tree / "bin" / item.name
        if item.name in _COPIED:
            shutil.copy2(item, target)
        else:
            target.symlink_to(item)
    for name in ("include", "lib", "lib64", "nvvm"):
        if (real / name).exists():
            (tree / name).symlink_to(real / name)
    (tree / "targets").mkdir()
    (tree / "targets" / native.name).symlink_to(native)
    (tree / "targets" / f"{host}-linux").symlink_to(native)
    return tree / "bin" / "nvcc"
