"""``imagegen verify IMAGE``: load each op in a sealed container (no network, read-only, non-root)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from imagegen import verify as verify_lib
from imagegen.commands._options import JsonOption
from imagegen.commands._output import console, emit_json
from imagegen.errors import BadInputError, VerificationFailedError
from op_builder import ALL_OPS
from op_builder.suggest import did_you_mean

ImageArgument = Annotated[str, typer.Argument(metavar="IMAGE", help="Image tag or id.")]
VerifyOpsOption = Annotated[
    Optional[str],
    typer.Option("--ops", help="Comma-separated ops to check. Default: the image's io.imagegen.ops label."),
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", metavar="SECONDS", help="Give up after this long.")
]


def verify(
    image: ImageArgument,
    ops: VerifyOpsOption = None,
    timeout: TimeoutOption = 300.0,
    json: JsonOption = False,
) -> None:
    """Verify IMAGE: exit 0 only if every op loads from its ahead-of-time module."""
    names = [n.strip() for n in (ops or "").split(",") if n.strip()] or None
    for name in names or ():
        if name not in ALL_OPS:
            raise BadInputError(
                f"unknown op {name!r}", hint=did_you_mean(name, ALL_OPS) or "known ops: " + ", ".join(ALL_OPS)
            )
    result = verify_lib.verify_image(image, ops=names, timeout=timeout)
    if json:
        emit_json(result.to_json())
    else:
        console().print(verify_lib.render_table(result))
    if not result.ok:
        failed = [op.name for op in result.ops if not op.ok]
        raise VerificationFailedError(
            f"{image}: these ops did not load ahead of time: {', '.join(failed) or '(none reported)'}",
            hint="the table above has each op's error",
            reported=json,  # the result document already says which op failed and why
        )
