"""The standard image matrix: dockerfiles/<target>[-arm64]/Dockerfile and dockerfiles/docker-bake.hcl.

Rendered from catalog defaults with ``--ops all`` and an empty environment, so the committed
files depend on the code only (a unit test checks they match). The platform is an axis:
arm64 images get their own folder and bake target, whose ``platforms`` names it. ``--op-source`` adds an op
package's ops to every image; its Dockerfiles then need the package staged in the build
context at ``_imagegen/op-sources/<package>/`` (their header says so). Files are written only when
their content changes.
"""

from __future__ import annotations

import contextlib
import json
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagegen.files import make_dirs, stat_input, write_if_changed
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.render.dockerfile import render

BAKE_FILE = "docker-bake.hcl"

# The images `imagegen matrix` renders (ops=all, catalog defaults for everything else):
# (accelerator, version, platform). arm64 where the catalog has it: the CPU and the CUDA
# releases of the Grace nodes' torch builds.
STANDARD_MATRIX: tuple[tuple[catalog.Accelerator, str | None, str], ...] = (
    ("cpu", None, catalog.AMD64),
    ("cuda", "12.1", catalog.AMD64),
    ("cuda", "12.4", catalog.AMD64),
    ("cuda", "12.6", catalog.AMD64),
    ("cuda", "12.8", catalog.AMD64),
    ("cuda", "13.0", catalog.AMD64),
    ("cuda", "13.2", catalog.AMD64),
    ("rocm", "6.2", catalog.AMD64),
    ("rocm", "6.4", catalog.AMD64),
    ("rocm", "7.2", catalog.AMD64),
    ("cpu", None, catalog.ARM64),
    ("cuda", "12.8", catalog.ARM64),
    ("cuda", "13.0", catalog.ARM64),
    ("cuda", "13.2", catalog.ARM64),
)


@dataclass(frozen=True)
class MatrixEntry:
    spec: ImageSpec

    @property
    def folder(self) -> str:
        return self.spec.target + catalog.platform_tag_suffix(self.spec.platform)  # "cpu", "cuda13.2-arm64"

    @property
    def bake_target(self) -> str:
        return self.folder.replace(".", "-")  # bake target names allow no dots

    @property
    def dockerfile_path(self) -> str:
        return f"{self.folder}/Dockerfile"


def standard_entries(op_sources: Sequence[str] = ()) -> tuple[MatrixEntry, ...]:
    entries = []
    for accelerator, version, platform in STANDARD_MATRIX:
        inp = SpecInput(
            ops="all",
            cpu=accelerator == "cpu",
            cuda=version if accelerator == "cuda" else None,
            rocm=version if accelerator == "rocm" else None,
            op_sources=tuple(op_sources),
            platform=platform,
            # The committed files build from the repository root, which holds no staged headers;
            # `imagegen build` and `bake` pin them (--stable-headers newest).
            stable_headers="own",
        )
        entries.append(MatrixEntry(build_spec(inp)))  # the defaults, no IMAGEGEN_* variable
    return tuple(entries)


def _hcl_string(text: str) -> str:
    # HCL strings are JSON strings, except that "${" and "%{" start a template: doubled, they are literal.
    return json.dumps(text).replace("${", "$${").replace("%{", "%%{")


def _hcl_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_hcl_string(item) for item in items) + "]"


@dataclass(frozen=True)
class BakeTarget:
    """One target of a bake file: what ``docker buildx bake`` builds, and with which arguments."""

    name: str
    dockerfile: str
    tag: str
    platform: str
    args: tuple[tuple[str, str], ...]  # build arguments: the bases, MAX_JOBS
    context: str = "."
    secrets: tuple[tuple[str, str], ...] = ()  # BuildKit secret id -> file
    network: str | None = None  # "host" for a compile cache on the host's loopback


def base_args(spec: ImageSpec) -> tuple[tuple[str, str], ...]:
    """The bases as the Dockerfile's build arguments (``ARG BASE_DEVEL`` / ``ARG BASE_RUNTIME``)."""
    args = [("BASE_DEVEL", spec.base_devel), ("BASE_RUNTIME", spec.base_runtime)]
    if spec.max_jobs is not None:
        args.append(("MAX_JOBS", str(spec.max_jobs)))
    return tuple(args)


def bake_file(targets: Sequence[BakeTarget], header: Sequence[str] = ()) -> str:
    """A docker-bake.hcl of ``targets``: a default group of all of them, and layer-cache export
    opt-in through ``CACHE_DIR`` (the docker driver cannot export a cache; a docker-container,
    remote or kubernetes builder can)."""
    lines = [*header, 'variable "CACHE_DIR" {', '  default = ""', "}", ""]
    lines += ['group "default" {', f"  targets = {_hcl_list([t.name for t in targets])}", "}"]
    for t in targets:
        name = _hcl_string(t.name)
        lines += [
            "",
            f"target {name} {{",
            f"  context    = {_hcl_string(t.context)}",
            f"  dockerfile = {_hcl_string(t.dockerfile)}",
            '  target     = "runtime"',
            f"  tags       = {_hcl_list([t.tag])}",
            f"  platforms  = {_hcl_list([t.platform])}",
            "  args = {",
            *(f"    {key} = {_hcl_string(value)}" for key, value in t.args),
            "  }",
        ]
        if t.secrets:
            lines.append(f"  secret     = {_hcl_list([f'id={sid},src={src}' for sid, src in t.secrets])}")
        if t.network is not None:
            lines.append(f"  network    = {_hcl_string(t.network)}")
        # One cache folder per target: local cache exports rewrite their index whole.
        lines += [
            f'  cache-from = CACHE_DIR == "" ? [] : ["type=local,src=${{CACHE_DIR}}/{t.name}"]',
            f'  cache-to   = CACHE_DIR == "" ? [] : ["type=local,dest=${{CACHE_DIR}}/{t.name},mode=max"]',
            "}",
        ]
    return "\n".join(lines) + "\n"


STANDARD_HEADER = (
    "# The standard image matrix. Regenerate with `imagegen matrix`; do not edit by hand.",
    "# Build from the repository root, with any builder (the docker driver's too), e.g.:",
    "#   docker buildx bake -f dockerfiles/docker-bake.hcl cpu",
    "# The bases are build arguments: --set cpu.args.BASE_DEVEL=mirror.example/python:3.11-slim-bookworm",
    "# Export the layer cache (a docker-container, remote or kubernetes builder; not the docker driver):",
    "#   CACHE_DIR=.cache/imagegen-bake docker buildx bake -f dockerfiles/docker-bake.hcl --builder NAME cpu",
    "# `imagegen bake` builds targets of this matrix, verifies and pushes them (docs/imagegen.md).",
    "",
)


def entry_target(entry: MatrixEntry, dockerfiles_dir: str = "dockerfiles") -> BakeTarget:
    """The committed bake file's target for ``entry`` (paths from the repository root)."""
    return BakeTarget(
        name=entry.bake_target,
        dockerfile=f"{dockerfiles_dir}/{entry.dockerfile_path}",
        tag=entry.spec.tag,
        platform=entry.spec.platform,
        args=base_args(entry.spec),
    )


def render_bake(entries: tuple[MatrixEntry, ...], dockerfiles_dir: str = "dockerfiles") -> str:
    """docker-bake.hcl: one target per entry, its bases as build arguments."""
    return bake_file([entry_target(e, dockerfiles_dir) for e in entries], STANDARD_HEADER)


def render_matrix(op_sources: Sequence[str] = (), platforms: Sequence[str] = ()) -> dict[str, str]:
    """{path relative to dockerfiles/: text} for the whole matrix (with these op packages' ops).

    ``platforms`` keeps the Dockerfiles of those platforms only; the bake file always names
    the whole matrix, so writing a subset into the committed folder never drops targets.
    """
    entries = standard_entries(op_sources)
    files = {
        entry.dockerfile_path: render(entry.spec)
        for entry in entries
        if not platforms or entry.spec.platform in platforms
    }
    files[BAKE_FILE] = render_bake(entries)
    return files


def write_matrix(
    out_dir: Path, op_sources: Sequence[str] = (), platforms: Sequence[str] = ()
) -> tuple[list[Path], list[Path]]:
    """Write the matrix under ``out_dir``; returns (written, unchanged) paths.

    Each file is written whole or not at all (``write_if_changed``). When one cannot be
    written (a full disk, a file in the way, an interrupt), the files and folders this call
    created are removed again, so a failed run leaves no empty folders or a partial matrix
    beside what was there before; files it replaced keep their new, whole content.
    """
    written: list[Path] = []
    unchanged: list[Path] = []
    created_files: list[Path] = []
    created_dirs: list[Path] = []
    try:
        for relative, text in sorted(render_matrix(op_sources, platforms).items()):
            path = out_dir / relative
            created_dirs.extend(_missing_dirs(path.parent))
            make_dirs(path.parent)
            existed = path.exists()
            if write_if_changed(path, text):
                written.append(path)
                if not existed:
                    created_files.append(path)
            else:
                unchanged.append(path)
    except BaseException:
        _remove_created(created_files, created_dirs)
        raise
    return written, unchanged


def _missing_dirs(folder: Path) -> list[Path]:
    """The folders ``mkdir -p folder`` would create, outermost first."""
    missing: list[Path] = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def _remove_created(files: Sequence[Path], dirs: Sequence[Path]) -> None:
    """Undo a failed ``write_matrix``: its new files, then its folders, innermost first."""
    for path in files:
        path.unlink(missing_ok=True)
    for folder in sorted(set(dirs), key=lambda d: len(d.parts), reverse=True):
        # Not empty (someone else's file in it) or already gone: leave it.
        with contextlib.suppress(OSError):
            folder.rmdir()


def stale_files(out_dir: Path, op_sources: Sequence[str] = (), platforms: Sequence[str] = ()) -> list[str]:
    """Relative paths whose content on disk differs from what the code renders (or is missing)."""
    stale = []
    for relative, text in sorted(render_matrix(op_sources, platforms).items()):
        if _read(out_dir / relative) != text:
            stale.append(relative)
    return stale


def _read(path: Path) -> str | None:
    """The text of the generated file at ``path``; None when it is missing or is no UTF-8 file."""
    found = stat_input(path, "--out")  # a path too long for the file system is bad input
    if found is None or not stat.S_ISREG(found.st_mode):
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # unreadable: not what the code renders either
        return None
