"""The ``imagegen`` command line: composition only; each command lives in imagegen/commands/.

Error handling lives here, once: commands raise errors derived from ``UserFacingError`` (imagegen's
and op_builder's share that root), and ``ImagegenGroup.invoke`` turns them into one message
(or ``{"error": ...}`` with --json) and the error's exit code: 0 ok, 1 build or verification
failed, 2 bad input, 3 no engine. An error marked ``reported`` (the command printed its whole
answer already) only sets the exit code. Commands never exit themselves.
``IMAGEGEN_DEBUG=1`` prints the traceback as well.

Ctrl-C and SIGTERM (what CI timeouts, job cancellation and ``timeout`` send) stop a command the
same way: SIGTERM is raised as ``Terminated``, a KeyboardInterrupt, so the cleanup that runs on
Ctrl-C (the build cancelled, the verify container and the staged context removed) runs for it
too. Exit 130 after Ctrl-C, 143 after SIGTERM, with one message (a JSON error under --json).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from types import FrameType
from typing import Any, cast

import typer
from typer.core import TyperGroup

from imagegen import settings
from imagegen.commands import (
    JSON_META_KEY,
    bake,
    build,
    catalog,
    dockerfile,
    doctor,
    matrix,
    new_op,
    ops,
    report_error,
    sbom,
    size,
    standins,
    verify,
)
from imagegen.errors import (
    BadInputError,
    ImagegenError,
    InterruptedByUser,
    TerminatedBySignal,
    UserFacingError,
)

# 128 + SIGINT, as shells report a command stopped by Ctrl-C; 128 + SIGTERM.
INTERRUPTED_EXIT_CODE = InterruptedByUser.exit_code
TERMINATED_EXIT_CODE = TerminatedBySignal.exit_code
_CLEANED_UP = (
    "what the command had started (a build, a verify container, the staged context) was stopped and removed"
)
# click's UsageError (unknown option, a value of the wrong type, a missing argument), reached
# through typer's public BadParameter: newer typer versions vendor click under a private name.
_USAGE_ERROR: type[Exception] = typer.BadParameter.__bases__[0]


class ImagegenGroup(TyperGroup):
    """Runs a command and maps any UserFacingError to its exit code; the only place that exits."""

    def invoke(self, ctx: Any) -> Any:  # Any: the Context class moved between typer versions
        # Read before parsing: a usage error can stop it before --json's callback has run.
        wants_json = "--json" in ctx.args
        try:
            return super().invoke(ctx)
        except _USAGE_ERROR as exc:
            # A malformed command line is bad input too: the same error and hint as the rest.
            usage = cast("typer.BadParameter", exc)
            path = usage.ctx.command_path if usage.ctx is not None else "imagegen"
            error = BadInputError(usage.format_message(), hint=f"see `{path} --help`")
            report_error(error, as_json=wants_json or bool(ctx.meta.get(JSON_META_KEY)))
            raise typer.Exit(error.exit_code) from None
        except UserFacingError as exc:
            if os.environ.get(settings.DEBUG.name, "").strip() not in ("", "0"):
                traceback.print_exc(file=sys.stderr)
            # A command that already printed its whole answer must not print a second document.
            if not (isinstance(exc, ImagegenError) and exc.reported):
                report_error(exc, as_json=bool(ctx.meta.get(JSON_META_KEY)))
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:
            stopped: InterruptedByUser = (
                TerminatedBySignal("terminated (SIGTERM)", hint=_CLEANED_UP)
                if isinstance(exc, Terminated)
                else InterruptedByUser("interrupted (Ctrl-C)", hint=_CLEANED_UP)
            )
            report_error(stopped, as_json=wants_json or bool(ctx.meta.get(JSON_META_KEY)))
            raise typer.Exit(stopped.exit_code) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as Python raises KeyboardInterrupt for Ctrl-C."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Raised once: a second SIGTERM must not cut the cleanup the first one started (it is
    # bounded: a cancelled build gets 15 s, a verify container's removal 10 s). SIGKILL still
    # stops the process at once.
    signal.signal(signal.SIGTERM, _ignore)
    raise Terminated


def _ignore(signum: int, frame: FrameType | None) -> None:
    # A Python-level no-op rather than SIG_IGN, which child processes would inherit.
    return None


app = typer.Typer(
    cls=ImagegenGroup,
    name="imagegen",
    help="Render, build and verify container images of selected C++/CUDA ops.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # errors are reported by ImagegenGroup, bugs as plain tracebacks
)
app.command("ops")(ops.ops)
app.command("dockerfile")(dockerfile.dockerfile)
app.command("build")(build.build)
app.command("verify")(verify.verify)
app.command("matrix")(matrix.matrix)
app.command("bake")(bake.bake_command)
app.command("catalog")(catalog.catalog)
app.command("doctor")(doctor.doctor)
app.command("new-op")(new_op.new_op)
app.command("standins")(standins.standins)
app.command("sbom")(sbom.sbom)
app.command("size")(size.size)


def main() -> None:
    """Console-script entry point (``imagegen = imagegen.cli:main``)."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        app(prog_name="imagegen")
    finally:
        signal.signal(signal.SIGTERM, previous)
