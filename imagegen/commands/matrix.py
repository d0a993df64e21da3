"""``imagegen matrix``: write the standard matrix's Dockerfiles and docker-bake.hcl."""

from __future__ import annotations

import stat
from pathlib import Path

from imagegen import log
from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import emit_json
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.files import stat_input
from imagegen.imagespec.checks import platform_name
from imagegen.imagespec.op_packages import STAGED_DIR
from imagegen.render.matrix import stale_files, write_matrix


@table_options("matrix")  # every option but --json: the table's rows (imagegen.options)
def matrix(
    matrix_out: Path = Path("dockerfiles"),
    matrix_check: bool = False,
    op_sources: tuple[str, ...] = (),
    matrix_platforms: tuple[str, ...] = (),
    json: JsonOption = False,
) -> None:
    """Render dockerfiles/<target>[-arm64]/Dockerfile for the standard matrix, and docker-bake.hcl."""
    platforms = tuple(platform_name(p) for p in matrix_platforms)
    found = stat_input(matrix_out, "--out")
    if found is not None and not stat.S_ISDIR(found.st_mode):
        raise BadInputError(
            f"--out {matrix_out} is a file, not a folder",
            hint="name the folder to write into, e.g. --out dockerfiles",
        )
    if matrix_check:
        stale = stale_files(matrix_out, op_sources, platforms)
        if json:
            emit_json({"ok": not stale, "stale": stale})
        if stale:
            raise BuildFailedError(
                f"{len(stale)} generated file(s) under {matrix_out} are out of date: {', '.join(stale)}",
                hint="run `imagegen matrix` and commit the result",
                reported=json,  # the document above already says which
            )
        if not json:
            log.info(f"{matrix_out} is up to date")
        return
    written, unchanged = write_matrix(matrix_out, op_sources, platforms)
    if json:
        emit_json({"written": [str(p) for p in written], "unchanged": [str(p) for p in unchanged]})
        return
    for path in written:
        log.info(f"wrote {path}")
    log.info(f"{len(written)} written, {len(unchanged)} unchanged")
    for folder in op_sources:
        name = Path(folder).resolve().name
        log.info(
            f"the build context needs {STAGED_DIR}/{name}/, a copy of {folder} (imagegen build stages it)"
        )
