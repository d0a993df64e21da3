"""A Debian root file system for a stand-in base: debootstrap, slimmed as debian:*-slim is.

``debootstrap --foreign`` unpacks only; its second stage configures the packages by running
them, under qemu for another architecture (``check_emulation``). One code path for both:
native too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from imagegen.building.standins.docker_cli import run_logged
from imagegen.building.standins.mirrors import Mirrors
from imagegen.errors import BuildFailedError

# What debian:*-slim leaves out (its debuerreotype recipe): documentation, manuals and
# translations, for the packages installed now and, through dpkg's path-exclude
# (templates/standins/dpkg-slim.cfg), later. The python:*-slim images the stand-ins replace
# are built on it.
_SLIM_DIRS = ("groff", "info", "linda", "lintian/overrides", "locale", "man")


def _template(name: str) -> str:
    return (resources.files("imagegen.building.standins") / "templates" / name).read_text()


def sources_list(suite: str, mirrors: Mirrors, components: tuple[str, ...]) -> str:
    """The base's apt sources: the suite, its updates and its security archive."""
    parts = " ".join(components)
    return (
        f"deb {mirrors.main} {suite} {parts}\n"
        f"deb {mirrors.main} {suite}-updates {parts}\n"
        f"deb {mirrors.security} {suite}-security {parts}\n"
    )


def check_emulation(arch: str, machine: str, binfmt: Path = Path("/proc/sys/fs/binfmt_misc")) -> None:
    """Programs of another architecture (debootstrap's second stage, apt in the derive
    containers) run through binfmt_misc and Debian's qemu-user-static. Its handlers are
    registered with the F flag (the interpreter opened at registration), which is what lets
    them work inside chroots and containers that do not hold qemu themselves."""
    native = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    if native.stdout.strip() == arch or os.uname().machine == machine:
        return
    handler = binfmt / f"qemu-{machine}"
    root = os.geteuid() == 0
    if not (binfmt / "status").exists() and root:
        # An unmounted binfmt_misc (a container, a minimal boot) holds no handlers: mount it.
        subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], capture_output=True, check=False
        )
    if not handler.exists() and root and shutil.which("update-binfmts"):
        subprocess.run(["update-binfmts", "--enable", f"qemu-{machine}"], capture_output=True, check=False)
    text = handler.read_text() if handler.exists() else ""
    if "enabled" not in text.splitlines():
        raise BuildFailedError(
            f"{arch} programs cannot run here: no enabled binfmt handler {handler}",
            hint="install Debian's qemu-user-static and binfmt-support (scripts/system-deps.sh), then "
            f"`mount -t binfmt_misc binfmt_misc {binfmt}; update-binfmts --enable qemu-{machine}`",
        )
    if not any(line.startswith("flags:") and "F" in line for line in text.splitlines()):
        raise BuildFailedError(
            f"the binfmt handler {handler} lacks the F flag, so it fails inside containers",
            hint=f"register Debian's qemu-user-static one (update-binfmts --enable qemu-{machine})",
        )


def slimify(root: Path) -> None:
    (root / "etc/dpkg/dpkg.cfg.d/docker").write_text(_template("dpkg-slim.cfg"))
    doc = root / "usr/share/doc"
    if doc.is_dir():
        for path in sorted(doc.rglob("*"), reverse=True):
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif path.name != "copyright":
                path.unlink()
    for name in _SLIM_DIRS:
        folder = root / "usr/share" / name
        if folder.is_dir():
            for entry in folder.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()


def debootstrap(
    root: Path, *, suite: str, arch: str, components: tuple[str, ...], mirrors: Mirrors, log: Path
) -> None:
    """A minbase ``suite`` root at ``root`` with its apt sources, slimmed, caches removed."""
    if shutil.which("debootstrap") is None:
        raise BuildFailedError(
            "debootstrap is missing", hint="apt-get install debootstrap (scripts/system-deps.sh)"
        )
    if os.geteuid() != 0:
        raise BuildFailedError(
            "debootstrap needs root", hint="run `imagegen standins` as root (or with sudo)"
        )
    run_logged(
        [
            "debootstrap",
            f"--arch={arch}",
            "--foreign",
            "--variant=minbase",
            f"--components={','.join(components)}",
            suite,
            str(root),
            mirrors.main,
        ],
        log,
        f"debootstrap {suite} ({arch})",
    )
    run_logged(
        ["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
        log,
        f"debootstrap {suite} ({arch}), second stage",
    )
    (root / "etc/apt/sources.list").write_text(sources_list(suite, mirrors, components))
    # Same apt habits as the official debian images: no package caches left in layers.
    (root / "etc/apt/apt.conf.d/docker-clean").write_text(_template("apt-docker-clean.conf"))
    slimify(root)
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/*.log"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def tar_root(root: Path) -> list[str]:
    """The tar command that streams ``root`` into an image (no /dev, /proc, /sys contents)."""
    return [
        "tar",
        "--numeric-owner",
        "--exclude=./dev/*",
        "--exclude=./proc/*",
        "--exclude=./sys/*",
        "-C",
        str(root),
        "-c",
        ".",
    ]
