"""``imagegen dockerfile``: render the Dockerfile of one image."""

from __future__ import annotations

import sys
from pathlib import Path

from imagegen import log
from imagegen.commands._options import table_options
from imagegen.commands._spec import make_spec
from imagegen.files import write_atomic
from imagegen.imagespec.spec import SpecInput
from imagegen.render.dockerfile import context_extras, render


@table_options("dockerfile")  # every option: the table's rows (-o FILE: dockerfile_output)
def dockerfile(image: SpecInput, dockerfile_output: Path | None = None) -> None:
    """Render the multi-stage Dockerfile (devel -> build -> runtime) for the selected ops."""
    spec = make_spec(image)
    text = render(spec)
    if dockerfile_output is None or str(dockerfile_output) == "-":  # '-' is stdout, as for most tools
        sys.stdout.write(text)
        return
    write_atomic(dockerfile_output, text)
    log.info(f"wrote {dockerfile_output}")
    needed = context_extras(spec)
    if needed:
        held = " and ".join(needed)
        log.info(f"build it from a context holding {held} (imagegen build stages that for you)")
