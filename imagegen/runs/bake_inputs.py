"""What ``imagegen bake`` judges before anything builds.

A bake of the arm64 targets runs for half an hour under emulation; an input that is wrong should
not wait for it. Judged here, each as one ``BadInputError`` (exit 2) with a hint: the folder of
``--bake-file``, the platforms ``--platform-torch`` / ``--platform-wheelhouse`` name, and, on a
builder that reads this engine's images, the stand-in bases of a ``--standins`` bake.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagegen.building.bases import standin_command
from imagegen.errors import BadInputError
from imagegen.files import output_error, refused_node
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec


def check_bake_file(path: Path | None) -> None:
    """BadInputError when ``--bake-file`` could not be written (a directory, a missing folder, a
    file where a folder should be, a folder we may not write), judged before the build rather
    than after it, with the messages writing it would give: a temporary file is made beside it
    and removed. A character device or a FIFO there is written in place, as ``write_atomic`` does;
    a block device or a socket, which it refuses, is refused here, before the build."""
    if path is None:
        return
    target = Path(os.path.realpath(path))  # a symbolic link is written through
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a symlink loop, a part of the path that is a file
        raise output_error(path, exc) from None
    else:
        if stat.S_ISDIR(mode):
            raise output_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
        if not stat.S_ISREG(mode):
            refused = refused_node(path, mode, hint="name a file for the bake file (or a FIFO with a reader)")
            if refused is not None:
                raise refused
            return
    tmp = target.parent / f".{target.name[:200]}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise output_error(path, exc) from None
    os.close(fd)
    tmp.unlink(missing_ok=True)


def check_platform_options(
    chosen: Mapping[str, Mapping[str, str]], platforms: Collection[str], command: str
) -> None:
    """BadInputError when ``--platform-torch`` / ``--platform-wheelhouse`` (``chosen``: option ->
    {platform: value}) names a platform this ``build``'s ``--platform`` or no target of this
    ``bake`` is for: it would change nothing."""
    built = set(platforms)
    named = ", ".join(sorted(built))
    for option, values in chosen.items():
        for platform in sorted(set(values) - built):
            if command == "build":
                raise BadInputError(
                    f"{option} names {platform}, which this build is not for (--platform {named})",
                    hint=f"add it: --platform {','.join(sorted(built | {platform}))}",
                )
            raise BadInputError(
                f"{option} names {platform}, which none of the targets is for (they are for {named})",
                hint=f"drop it, or add a target for {platform} (`imagegen bake --help` names them)",
            )


@dataclass(frozen=True)
class BakeRequest:
    """One target to bake: its name in the matrix and its resolved spec."""

    name: str
    spec: ImageSpec


def missing_standins(
    specs: Mapping[str, ImageSpec], present: Callable[[Sequence[str]], Mapping[str, bool] | None]
) -> None:
    """BadInputError naming each target whose stand-in bases are not on this machine, with the
    command that makes them. ``present`` answers which images the engine holds (None: it cannot
    tell, and nothing is judged)."""
    wanted: dict[str, tuple[str, ...]] = {}
    for name, spec in specs.items():
        standins = catalog.standin_bases(spec.target, spec.platform) or ()
        used = tuple(ref for ref in dict.fromkeys((spec.base_devel, spec.base_runtime)) if ref in standins)
        if used:
            wanted[name] = used
    found = present(sorted({ref for refs in wanted.values() for ref in refs})) if wanted else None
    if found is None:
        return
    missing = {name: [ref for ref in refs if not found.get(ref, False)] for name, refs in wanted.items()}
    missing = {name: refs for name, refs in missing.items() if refs}
    if not missing:
        return
    commands = " and ".join(
        dict.fromkeys(f"`{standin_command(specs[name].target, specs[name].platform)}`" for name in missing)
    )
    which = "; ".join(f"{name} ({', '.join(refs)})" for name, refs in missing.items())
    slow = any(specs[name].platform != catalog.DEFAULT_PLATFORM for name in missing)
    raise BadInputError(
        f"--standins: the stand-in bases of {which} are not on this machine",
        hint=f"make them with {commands}"
        + (" (under emulation: a quarter of an hour or more)" if slow else "")
        + f", or leave {', '.join(missing)} out of the bake",
    )
