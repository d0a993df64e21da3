"""``python -m op_builder {report,list,verify,selftest,binary,flags,plan,archs}``.

argparse rather than a CLI framework: this runs inside slim runtime images,
whose only dependencies are torch and packaging. This ``main`` is the only place
that turns errors into exit codes (0 ok, 1 failed, 2 bad input, 130 interrupted);
with ``--json`` every outcome, a malformed command line and Ctrl-C included, is one
JSON document on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from op_builder import cli_table, settings
from op_builder.commands import (
    cmd_archs,
    cmd_binary,
    cmd_flags,
    cmd_plan,
    cmd_preflight,
    cmd_report,
    cmd_selftest,
    cmd_verify,
    emit,
)
from op_builder.errors import BadInputError, UserFacingError
from op_builder.listing import cmd_list
from op_builder.op_sources import SOURCES_VARIABLE, source_dirs

# 128 + SIGINT, as shells report a command stopped by Ctrl-C (imagegen's too).
INTERRUPTED_EXIT_CODE = 130


# ------------------------------------------------------------------ entry


class _UsageError(Exception):
    """A malformed command line, as argparse words it, and the (sub)command it was for."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised to ``main`` (which reports it like any bad input,
    as JSON under --json) instead of printing the usage and exiting. Subcommands get it too."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self.prog, message)


def _parser() -> argparse.ArgumentParser:
    """The command line ``op_builder.cli_table`` describes: every subcommand and option is a row."""
    parser = _Parser(prog="python -m op_builder", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in cli_table.COMMANDS:
        parsed = sub.add_parser(command.name, help=command.help)
        groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
        for option in cli_table.options_of(command.name):
            target: Any = parsed
            if option.group is not None:
                if option.group not in groups:
                    groups[option.group] = parsed.add_mutually_exclusive_group()
                target = groups[option.group]
            target.add_argument(*(option.flags or (option.name,)), **option.argparse_settings())
    return parser


_COMMANDS = {
    "binary": cmd_binary,
    "preflight": cmd_preflight,
    "report": cmd_report,
    "list": cmd_list,
    "verify": cmd_verify,
    "selftest": cmd_selftest,
    "flags": cmd_flags,
    "plan": cmd_plan,
    "archs": cmd_archs,
}


@contextlib.contextmanager
def _with_op_sources(env: Mapping[str, str], extra: Sequence[str]) -> Iterator[Mapping[str, str]]:
    """``env`` with ``--op-source`` folders added to ``DS_OP_SOURCES``, which the process
    environment also holds meanwhile: the registry, setup-time and JIT builds all read it there."""
    sources = source_dirs(env, extra)
    if not sources:
        yield env
        return
    value = os.pathsep.join(str(p) for p in sources)
    before = os.environ.get(SOURCES_VARIABLE)
    os.environ[SOURCES_VARIABLE] = value
    try:
        yield {**env, SOURCES_VARIABLE: value}
    finally:
        if before is None:
            os.environ.pop(SOURCES_VARIABLE, None)
        else:
            os.environ[SOURCES_VARIABLE] = before


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    # Read before parsing: a usage error stops argparse before --json is known.
    wants_json = "--json" in arguments
    try:
        try:
            args = _parser().parse_args(arguments)
        except _UsageError as exc:
            usage = BadInputError(exc.message, hint=f"see `{exc.prog} --help`")
            return _report_error(usage, wants_json, env)
        try:
            with _with_op_sources(env, args.op_source) as with_sources:
                return _COMMANDS[args.command](args, with_sources)
        except UserFacingError as exc:
            return _report_error(exc, bool(getattr(args, "json", False)), env)
    except KeyboardInterrupt:
        if wants_json:
            emit({"error": {"message": "interrupted", "hint": None, "exit_code": INTERRUPTED_EXIT_CODE}})
        print("interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    except BrokenPipeError:
        # The reader went away (`... --json | head`): nothing more can be said on stdout. As
        # imagegen (click): exit 1, no traceback, and stdout pointed at /dev/null so that
        # Python's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _report_error(exc: UserFacingError, as_json: bool, env: Mapping[str, str]) -> int:
    if env.get(settings.DEBUG.name) == "1":
        traceback.print_exc()
    if as_json:
        emit(exc.to_json())
    print(f"error: {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=sys.stderr)
    return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
