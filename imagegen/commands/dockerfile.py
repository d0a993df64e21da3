"""``imagegen dockerfile``: render the Dockerfile of one image."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from imagegen import log
from imagegen.commands._options import table_options
from imagegen.commands._spec import make_spec
from imagegen.files import write_atomic
from imagegen.imagespec.spec import SpecInput
from imagegen.render.dockerfile import context_extras, render

OutputOption = Annotated[
    Optional[Path],
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write here (atomically) instead of stdout ('-': stdout)."
    ),
]


@table_options("dockerfile")
def dockerfile(image: SpecInput, output: OutputOption = None) -> None:
    """Render the multi-stage Dockerfile (devel -> build -> runtime) for the selected ops."""
    spec = make_spec(image)
    text = render(spec)
    if output is None or str(output) == "-":  # '-' is stdout, as for most tools
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    log.info(f"wrote {output}")
    needed = context_extras(spec)
    if needed:
        held = " and ".join(needed)
        log.info(f"build it from a context holding {held} (imagegen build stages that for you)")
