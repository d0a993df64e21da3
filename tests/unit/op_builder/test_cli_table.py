"""The command line of ``python -m op_builder`` is its table: every row parsed, every command handled."""

from __future__ import annotations

from op_builder import cli_table
from op_builder.__main__ import _COMMANDS, _parser
from op_builder.cli_table import COMMANDS, OPTIONS, Command, Option, table_problems


def test_the_table_is_whole_and_every_command_has_its_handler() -> None:
    assert table_problems() == []
    assert set(_COMMANDS) == {command.name for command in COMMANDS}


def test_a_broken_table_is_named() -> None:
    commands = (Command("report", ""), Command("plan", ""))
    options = (
        Option("cuda", ("--cuda",), ("report", "plans"), "x"),
        Option("json", ("--json",), ("report",), "x"),
        Option("json2", ("--json",), ("report",), "x"),
        Option("ops", (), ("plan",), "x"),
        Option("ops", (), ("plan",), "y"),
    )
    assert table_problems(commands, options) == [
        "cuda: no command 'plans'",
        "plan: name 'ops' twice",
        "report: flag '--json' twice",
    ]


def test_each_row_is_parsed_as_it_says() -> None:
    parser = _parser()
    listing = parser.parse_args(["list", "--gpu", "--op-source", "a", "--op-source", "b"])
    assert (listing.gpu, listing.cpu, listing.op_source, listing.json) == (True, False, ["a", "b"], False)
    verify = parser.parse_args(["verify", "cpu_adam", "cpu_lion", "--no-selftest", "--device", "cpu"])
    assert (verify.ops, verify.selftest, verify.device, verify.require_gpu) == (
        ["cpu_adam", "cpu_lion"],
        False,
        "cpu",
        False,
    )
    assert parser.parse_args(["archs"]).list is None
    assert parser.parse_args(["flags", "cpu_lion", "--cuda", "13.0"]).cuda == "13.0"
    # Every row reaches the parser of each of its commands, by its attribute.
    for command in COMMANDS:
        parsed = vars(parser.parse_args([command.name, *_positionals(command.name)]))
        assert {option.name for option in cli_table.options_of(command.name)} <= parsed.keys(), command.name


def _positionals(command: str) -> list[str]:
    """One value for each positional a command requires."""
    return [
        "x" for option in OPTIONS if command in option.commands and not option.flags and option.nargs is None
    ]
