"""``imagegen size IMAGE``: an image's bytes by part (base, torch, Python packages, CUDA wheels,
each op by arch), measured in the sealed container the verifier uses."""

from __future__ import annotations

from typing import Annotated

import typer

from imagegen.commands._options import JsonOption
from imagegen.commands._output import console, emit_json
from imagegen.proof import size as size_lib

SizeImageArgument = Annotated[
    str, typer.Argument(metavar="IMAGE", help="Image tag or id, built by imagegen.")
]


def size(image: SizeImageArgument, json: JsonOption = False) -> None:
    """Show IMAGE's size by part: base, torch, Python packages, CUDA runtime wheels, each op (by arch)."""
    report = size_lib.measure_image(image)
    if json:
        emit_json(report.to_json())
        return
    out = console()
    for line in report.lines():
        out.print(line, markup=False)
