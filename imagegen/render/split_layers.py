"""Split the build stage's venv into the runtime's layers, by how often they change.

Run inside the image's build stage (standard library only; nothing of imagegen is there):

    PYTHONHASHSEED=0 python split_layers.py VENV SITE OUT DEPS_LIST EPOCH [EXTRA_DIR ...]

- ``OUT/deps``: the venv as the devel stage made it: the site folder's entries named in
  ``DEPS_LIST`` (what the devel stage left there: torch, its NVIDIA libraries, NumPy, pip) and the
  venv's own files (its ``bin`` links, ``pyvenv.cfg``, the dependencies' scripts). It changes with
  torch and Python, not with an op;
- ``OUT/modules``: the op modules built for torch's stable ABI (``*.abi3.so``) among those entries:
  the same bytes in every image of the target, whatever its torch (``--stable-headers``), so two
  images of one target with different torch releases share this layer too;
- ``OUT/ours``: every other entry of the site folder (this project's wheel with the op modules,
  op packages' distributions and their ``.pth``), the scripts our distributions install, and each
  ``EXTRA_DIR`` (op packages' sources). It changes with an op, and is small.

The runtime stage copies ``deps`` first, ``modules`` (when the image has stable ops) and ``ours`` on
top, so an op change, an op added or one removed ships only the small layers, and two images of
one target share the large one to the byte:

- every file and folder gets one fixed time, ``EPOCH`` (the build's ``SOURCE_DATE_EPOCH``; 0 when
  empty), as Jib does, not the commit's: a new commit must not make torch's layer new;
- bytecode is hash-based (``checked-hash``: no time stamp in it; Python checks it against its
  source's hash at import) and compiled with ``PYTHONHASHSEED=0`` (the order of a frozenset
  constant otherwise follows the hash seed), each file beside the module it compiles;
- ``direct_url.json`` of our distributions, which names the wheel's file and its hash (a wheel
  holds its files' times), is dropped, and its line with it from RECORD.

The engine makes the layer tar from these (sorted by the engine, owners root's), so the same
inputs give the same layer digest on a cold cache, another day or another machine.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import sys
from pathlib import Path


def _record_paths(site: Path, info: Path) -> list[Path]:
    """The files a distribution's RECORD names (``../../../bin/x`` resolved), its RECORD too."""
    record = info / "RECORD"
    paths = [record]
    if record.is_file():
        for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
            name = line.rsplit(",", 2)[0].strip().strip('"') if line.count(",") >= 2 else line.strip()
            if name:
                paths.append(Path(os.path.normpath(site / name)))
    return paths


def _ours(site: Path, venv: Path, deps: set[str]) -> list[Path]:
    """The site folder's entries the devel stage did not leave, and the venv's scripts that their
    distributions own."""
    owned = {site / name for name in os.listdir(site) if name not in deps}
    for info in [p for p in owned if p.name.endswith(".dist-info")]:
        owned.update(
            p for p in _record_paths(site, info) if p.is_relative_to(venv) and not p.is_relative_to(site)
        )
    # A top-level module's bytecode sits in the site folder's own __pycache__ (the dependencies').
    cache = site / "__pycache__"
    for module in [p for p in owned if p.parent == site and p.suffix == ".py"]:
        owned.update(cache.glob(f"{module.stem}.*.pyc"))
    return sorted(p for p in owned if p.exists() or p.is_symlink())


def _stable_modules(path: Path) -> list[Path]:
    """The modules built for torch's stable ABI at or under ``path`` (Python's limited API names them)."""
    if path.is_dir() and not path.is_symlink():
        return sorted(path.rglob("*.abi3.so"))
    return [path] if path.name.endswith(".abi3.so") else []


def _drop_direct_url(info: Path) -> None:
    direct = info / "direct_url.json"
    if not direct.exists():
        return
    direct.unlink()
    record = info / "RECORD"
    if record.is_file():
        lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
        record.write_text("".join(x for x in lines if not x.startswith(f"{info.name}/direct_url.json,")))


def _hash_based_bytecode(root: Path) -> None:
    """Compile again, hash-based, every module whose bytecode the build wrote (only those)."""
    for pyc in sorted(root.rglob("__pycache__/*.pyc")):
        source = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
        if source.is_file():
            py_compile.compile(
                str(source),
                cfile=str(pyc),
                dfile=str(source),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )
        else:
            pyc.unlink()  # bytecode of a module that is gone: nothing imports it


def _move(path: Path, source_root: Path, target_root: Path) -> None:
    target = target_root / path.relative_to(source_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), str(target))


def _fix_times(root: Path, when: int) -> None:
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in [*files, *dirs]:
            os.utime(os.path.join(folder, name), (when, when), follow_symlinks=False)
    os.utime(root, (when, when))


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    venv, site, out, deps_list = Path(argv[0]), Path(argv[1]), Path(argv[2]), Path(argv[3])
    when, extras = int(argv[4] or 0), argv[5:]
    if sys.flags.hash_randomization:
        raise SystemExit(
            "split_layers: run with PYTHONHASHSEED=0 (bytecode of set constants follows the seed)"
        )
    deps = set(deps_list.read_text().split())
    ours = _ours(site, venv, deps)
    for info in (p for p in ours if p.name.endswith(".dist-info")):
        _drop_direct_url(info)
    _hash_based_bytecode(venv)
    stable = [module for path in ours for module in _stable_modules(path)]
    for module in stable:
        _move(module, Path("/"), out / "modules")
    (out / "modules").mkdir(exist_ok=True)
    for path in ours:
        _move(path, Path("/"), out / "ours")
    for extra in extras:
        _hash_based_bytecode(Path(extra))
        _move(Path(extra), Path("/"), out / "ours")
    _move(venv, Path("/"), out / "deps")
    (out / "ours" / venv.relative_to("/")).mkdir(parents=True, exist_ok=True)
    for layer in ("deps", "modules", "ours"):
        _fix_times(out / layer, when)
    print(
        f"split_layers: {len(stable)} stable op modules, {len(ours)} entries of ours, "
        f"the rest of {venv} the dependencies'"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
