"""Every subcommand and option of ``python -m op_builder``: one table, the parser drawn from it.

Data only, as ``op_builder.settings`` is for the ``DS_*`` variables (and ``imagegen.options`` for
imagegen's options): a row names its flags, the commands that take it, its help, and how argparse
reads it. ``__main__`` builds the parser from these rows and nothing else, so adding an option is a
row and the code that reads it. The option rows' shape: ``name`` (the parsed attribute), ``flags``
(``("--cuda",)``, or ``()`` for a positional argument named ``name``), ``commands``, ``help``,
and argparse's own settings of the value (``action``, ``choices``, ``default``, ``metavar``,
``nargs``); ``group``: options of one command sharing a group exclude each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from op_builder.op_sources import SOURCES_VARIABLE
from op_builder.selftest.isa import ISA_LEVELS


@dataclass(frozen=True)
class Command:
    name: str
    help: str


@dataclass(frozen=True)
class Option:
    name: str
    flags: tuple[str, ...]
    commands: tuple[str, ...]
    help: str
    action: str | None = None  # "store_true", "store_false", "append"
    choices: tuple[str, ...] | None = None
    default: Any = None
    metavar: str | None = None
    nargs: str | None = None
    group: str | None = None  # options of one command in one group exclude each other

    def argparse_settings(self) -> dict[str, Any]:
        """What ``add_argument`` takes besides the flags, as argparse names it."""
        settings: dict[str, Any] = {"help": self.help} if self.help else {}
        if self.flags:
            settings["dest"] = self.name
        for key in ("action", "choices", "metavar", "nargs"):
            value = getattr(self, key)
            if value is not None:
                settings[key] = value
        if self.default is not None:
            settings["default"] = self.default
        return settings


COMMANDS: tuple[Command, ...] = (
    Command("report", "every op: target, installed, compatible here, and why not"),
    Command("list", "the names of the known ops, one a line, in the registry's order"),
    Command("verify", "load each op ahead of time, run its self-test, audit its GPU code"),
    Command("selftest", "each op's kernel against an independent reference; exit 0 only if all pass"),
    Command("flags", "the exact sources and flags an op gets under this environment"),
    Command("plan", "which ops DS_BUILD_* selects, their archs, and every error"),
    Command("preflight", "can every installed op run on this machine's GPUs and driver? exit 0 if so"),
    Command("binary", "the GPU code a shared object holds: SASS, PTX and gfx targets"),
    Command("archs", "resolve an arch list and show its nvcc flags"),
)
_ALL = tuple(command.name for command in COMMANDS)
_DEVICES = ("cpu", "cuda", "auto")

OPTIONS: tuple[Option, ...] = (
    Option("json", ("--json",), _ALL, "machine-readable output", action="store_true"),
    Option(
        "op_source",
        ("--op-source",),
        _ALL,
        f"an op package directory whose ops join ours (repeatable; also {SOURCES_VARIABLE})",
        action="append",
        default=[],
        metavar="DIR",
    ),
    Option("cuda", ("--cuda",), ("report",), "judge against this CUDA toolkit version", metavar="X.Y"),
    Option(
        "gpu",
        ("--gpu",),
        ("list",),
        "only the ops with GPU code (CUDA / HIP sources)",
        "store_true",
        group="kind",
    ),
    Option("cpu", ("--cpu",), ("list",), "only the C++ (CPU) ops", action="store_true", group="kind"),
    Option("ops", (), ("verify",), "ops to verify (default: every installed op)", nargs="*"),
    Option(
        "selftest",
        ("--no-selftest",),
        ("verify",),
        "only load and audit, skip self-tests",
        action="store_false",
    ),
    Option(
        "device",
        ("--device",),
        ("verify",),
        "where self-tests run (default: auto)",
        choices=_DEVICES,
        default="auto",
    ),
    Option(
        "require_gpu",
        ("--require-gpu",),
        ("verify",),
        "a GPU op's self-test skipped for want of a GPU fails",
        action="store_true",
    ),
    Option("ops", (), ("selftest",), "ops to test (default: the installed ops, else every op)", nargs="*"),
    Option(
        "device",
        ("--device",),
        ("selftest",),
        "where GPU ops run: cuda, or cpu (GPU ops are then skipped, and fail); auto: cuda if visible",
        choices=_DEVICES,
        default="auto",
    ),
    Option(
        "isa",
        ("--isa",),
        ("selftest",),
        "force the CPU optimizers' instruction set (default: the best this CPU runs)",
        choices=(*ISA_LEVELS, "auto"),
        default="auto",
    ),
    Option("op", (), ("flags",), ""),  # no help of its own: the usage line names it
    Option("cuda", ("--cuda",), ("flags", "plan"), "plan for this CUDA toolkit version", metavar="X.Y"),
    Option(
        "require_gpu",
        ("--require-gpu",),
        ("preflight",),
        "a GPU op that cannot be checked for want of a GPU fails",
        action="store_true",
    ),
    Option("file", (), ("binary",), "a compiled module (.so) or object file"),
    Option("list", (), ("archs",), "arch list (default: TORCH_CUDA_ARCH_LIST or the toolkit's)", nargs="?"),
    Option("cuda", ("--cuda",), ("archs",), "validate against this CUDA toolkit version", metavar="X.Y"),
)


def options_of(command: str) -> tuple[Option, ...]:
    """The rows ``command`` takes, in the table's order (``--json`` and ``--op-source`` first)."""
    return tuple(option for option in OPTIONS if command in option.commands)


def table_problems(
    commands: tuple[Command, ...] = COMMANDS, options: tuple[Option, ...] = OPTIONS
) -> list[str]:
    """What is wrong with a table: a row for no command, a flag or name a command takes twice."""
    names = {command.name for command in commands}
    problems = []
    for option in options:
        problems += [f"{option.name}: no command {c!r}" for c in option.commands if c not in names]
    for command in sorted(names):
        taken = [option for option in options if command in option.commands]
        for what, values in (
            ("flag", [flag for option in taken for flag in option.flags]),
            ("name", [option.name for option in taken]),
        ):
            problems += [
                f"{command}: {what} {v!r} twice" for v in sorted({v for v in values if values.count(v) > 1})
            ]
    return problems
