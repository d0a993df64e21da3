"""The options table (imagegen.options): each option declared once, and everything else made from
it: the Typer options of every command that takes one, SpecInput's fields and defaults, each
option's check, the settings table, the docs table, and one cascade (flag > IMAGEGEN_* > the
row's default), run once per command."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from imagegen import options
from imagegen import settings as imagegen_settings
from imagegen.cli import app
from imagegen.commands import _options, _spec
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.checks import DEFAULT_BYTECODE
from imagegen.imagespec.spec import SpecInput, option_check, spec_input
from imagegen.runs import run_choices
from op_builder import settings

REPO = Path(__file__).resolve().parents[4]


def _cli_options(command: str) -> dict[str, tuple[str, ...]]:
    """The command's click options: parameter name -> its flags (as `--help` lists them)."""
    found = get_command(app).commands[command]  # type: ignore[attr-defined]
    return {p.name or "": tuple(p.opts) + tuple(p.secondary_opts) for p in found.params}


@pytest.mark.parametrize("command", ["dockerfile", "build", "bake"])
def test_each_command_takes_exactly_the_tables_options_for_it(command: str) -> None:
    cli = _cli_options(command)
    for option in options.OPTIONS:
        if command in option.commands:
            flags = option.flags[0].split("/") + list(option.flags[1:])
            assert option.name in cli and set(flags) <= set(cli[option.name]), option.name
        else:  # bake's --push (a registry, push_registry) is not build's --push (a switch, push)
            assert option.name not in cli, option.name


def test_matrix_takes_the_tables_op_source() -> None:
    assert ("--op-source",) in _cli_options("matrix").values()


def test_the_settings_table_holds_every_options_variable() -> None:
    assert options.env_settings() == imagegen_settings.OPTIONS
    assert [s.name for s in imagegen_settings.OPTIONS] == [o.env_name for o in options.OPTIONS if o.env_name]
    assert all(s in imagegen_settings.SETTINGS for s in imagegen_settings.OPTIONS)


def test_the_docs_table_is_the_options_table() -> None:
    page = (REPO / "docs" / "imagegen.md").read_text()
    assert settings.table_under(page, options.DOCS_HEADING) == options.markdown_table(), (
        "run scripts/settings_tables.py"
    )
    edited = page.replace("| `--cpu` |", "| `--cpu` (CPU) |")
    assert settings.table_under(edited, options.DOCS_HEADING) != options.markdown_table()


# A value each variable's kind takes, and what the field then holds.
SAMPLES: dict[str, tuple[str, Any]] = {
    "flag": ("1", True),
    "int": ("7", "7"),  # text until inputs.max_jobs checks it
}


@pytest.mark.parametrize("option", [o for o in options.OPTIONS if o.env_name], ids=lambda o: o.name)
def test_the_cascade_is_flag_then_variable_then_default_for_every_option(option: options.ImageOption) -> None:
    assert option.env_name is not None
    text, expected = SAMPLES.get(option.env_kind or "", ("a:b" if option.form == "repeat" else " x ", None))
    if expected is None:
        expected = ("a", "b") if option.form == "repeat" else "x"
    command = sorted(option.commands)[0]
    from_env = options.resolve({}, {option.env_name: text}, command)
    assert from_env[option.name] == expected
    flag: Any = ("c",) if option.form == "repeat" else (False if option.env_kind == "flag" else "flag")
    given = options.resolve({option.name: flag}, {option.env_name: text}, command)
    if option.form == "switch" and flag is False:
        assert given[option.name] is True  # a switch not given is off: the variable fills it
    else:
        assert given[option.name] == flag
    # Unset (or empty, but for a boolean, where empty reads as off as in op_builder's switches):
    # the row's default.
    assert options.resolve({}, {}, command)[option.name] == option.default_for(command)
    if option.env_kind != "flag":
        assert options.resolve({}, {option.env_name: ""}, command)[option.name] == option.default_for(command)


def test_spec_input_is_the_tables_image_options_with_their_defaults() -> None:
    rows = {o.name: o for o in options.OPTIONS if o.spec}
    made = SpecInput()
    assert dict(made.items()) == {name: row.default for name, row in rows.items()}
    # What code builds without a command line is what the cascade gives with no variable.
    assert spec_input({}, cpu=True, ops="cpu_adam") == SpecInput(cpu=True, ops="cpu_adam")
    assert spec_input({}, "bake").ops == "all" and SpecInput().ops is None
    with pytest.raises(TypeError, match="push"):
        spec_input({}, push=True)  # a run option is not what the image is
    with pytest.raises(TypeError, match="torhc"):
        SpecInput(torhc="2.5")  # a misspelt option is refused, as a dataclass refuses a field
    with pytest.raises(AttributeError, match="torhc"):
        _ = made.torhc


def test_spec_input_is_frozen_and_replace_makes_a_copy() -> None:
    made = SpecInput(cpu=True, ops="cpu_adam")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.torch = "2.5"
    changed = made.replace(torch="2.5.1")
    assert (changed.torch, made.torch, changed.ops) == ("2.5.1", None, "cpu_adam")
    assert changed != made and hash(made) == hash(SpecInput(cpu=True, ops="cpu_adam"))
    with pytest.raises(TypeError, match="torhc"):
        made.replace(torhc="2.5")


def test_a_new_image_row_is_an_option_of_spec_input_with_no_other_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = options.ImageOption(
        name="example_option",
        flags=("--example-option",),
        form="value",
        help="An option added by the test.",
        commands=frozenset({"build"}),
        default="given-by-default",
    )
    table = (*options.OPTIONS, row)
    monkeypatch.setattr(options, "OPTIONS", table)
    monkeypatch.setattr(options, "BY_NAME", {o.name: o for o in table})
    assert SpecInput().example_option == "given-by-default"
    assert SpecInput(example_option="x").example_option == "x"
    assert spec_input({"IMAGEGEN_EXAMPLE_OPTION": "y"}).example_option == "given-by-default"  # no variable


@pytest.fixture
def no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(options.ENV_PREFIX)]:
        monkeypatch.delenv(name)


def _replace_row(monkeypatch: pytest.MonkeyPatch, name: str, **changes: Any) -> None:
    row = dataclasses.replace(options.BY_NAME[name], **changes)
    table = tuple(row if o.name == name else o for o in options.OPTIONS)
    monkeypatch.setattr(options, "OPTIONS", table)
    monkeypatch.setattr(options, "BY_NAME", {o.name: o for o in table})


class _Stop(BadInputError):
    """Raised by the spec builder's stand-in once it has seen the command's input."""


def _seen_inputs(monkeypatch: pytest.MonkeyPatch) -> list[SpecInput]:
    seen: list[SpecInput] = []

    def record(inp: SpecInput) -> Any:
        seen.append(inp)
        raise _Stop("seen", hint="stopped by the test")

    monkeypatch.setattr(_spec, "build_spec", record)
    return seen


@pytest.mark.usefixtures("no_variables")
def test_a_rows_default_is_what_a_command_gets_without_flag_or_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _seen_inputs(monkeypatch)
    assert CliRunner().invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam"]).exit_code == 2
    assert CliRunner().invoke(app, ["bake", "cpu"]).exit_code == 2
    dockerfile, bake = seen
    for option in options.OPTIONS:
        if option.spec and option.name not in ("cpu", "ops"):
            assert getattr(dockerfile, option.name) == option.default_for("dockerfile"), option.name
    assert (dockerfile.ops, bake.ops) == ("cpu_adam", "all")  # bake's own default, from its row
    # The value comes from the row: another default there is what the command then gets.
    _replace_row(monkeypatch, "numpy", default=False)
    assert CliRunner().invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam"]).exit_code == 2
    assert seen[-1].numpy is False


# A value each checked option's check refuses (every row with a check needs one here).
BAD_VALUES: dict[str, str] = {
    "op_sources": "x" * 5000,  # a name no file system takes
    "platform": "linux/s390x",
    "build_platform": "linux/s390x",
    "build_wheelhouse": "/nonexistent/wheels",
    "torch_index": "ftp://example.com/simple",
    "wheelhouse": "/nonexistent/wheels",
    "ca_cert": "/nonexistent/ca.pem",
    "bytecode": "some",
    "stable_headers": "2.9.1",
    "max_jobs": "0",
    "compile_cache": "nfs://cache",
}


def test_every_check_is_a_function_of_imagespec_and_has_a_bad_value_here() -> None:
    checked = {o.name for o in options.OPTIONS if o.check}
    assert checked == set(BAD_VALUES)
    for option in options.OPTIONS:
        if option.check:
            assert option.spec, option.name  # a run option is checked by its command
            assert callable(option_check(option.check)), option.check
    with pytest.raises(AttributeError):
        option_check("inputs.no_such_check")


@pytest.mark.usefixtures("no_variables")
@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_value_of_a_checked_option_exits_2_with_one_message(name: str) -> None:
    option = options.BY_NAME[name]
    args = ["dockerfile", "--cpu", "--ops", "cpu_adam", option.flag, BAD_VALUES[name]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and "hint:" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("no_variables")
def test_a_check_left_off_its_row_lets_the_bad_value_through(monkeypatch: pytest.MonkeyPatch) -> None:
    _replace_row(monkeypatch, "max_jobs", check="")
    result = CliRunner().invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam", "--max-jobs", "0"])
    assert result.exit_code == 0  # the row's check is what refuses it


@pytest.mark.usefixtures("no_variables")
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["dockerfile", "--cpu", "--ops", "cpu_adam"], id="dockerfile"),
        # Fails in the second platform's spec: after every spec was made from the one input.
        pytest.param(
            ["build", "--cuda", "12.4", "--ops", "all", "--platform", "linux/amd64,linux/arm64"],
            id="build",
        ),
        pytest.param(["bake", "cpu", "cpu-arm64", "--max-jobs", "0"], id="bake"),
    ],
)
def test_resolve_runs_once_per_command(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    calls: list[str] = []
    real = options.resolve

    def counted(flags: Any, env: Any, command: str) -> dict[str, Any]:
        calls.append(command)
        return real(flags, env, command)

    monkeypatch.setattr(options, "resolve", counted)
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, result.output
    assert calls == [args[0]]


def test_the_docs_default_cell_agrees_with_the_value() -> None:
    for option in options.OPTIONS:
        value = option.default
        if not option.docs_default or value in (None, False, ()):
            continue  # written from the value, or words for what has no value
        if option.form == "toggle":  # the side it is on by default, named
            side = option.flag.split("/")[0 if value else 1].lstrip("-").replace("no-", "")
            assert side.lower() in option.docs_default.lower(), option.name
        else:
            assert f"`{value}`" in option.docs_default, option.name
    assert "`linux/amd64`" in options.BY_NAME["build_platform"].docs_default  # --platform's default
    assert options.BY_NAME["platform"].docs_row().split("|")[3].strip() == "`linux/amd64`"


def test_the_catalogs_default_platform_is_the_tables() -> None:
    assert (
        options.default("platform") == catalog.DEFAULT_PLATFORM
        and catalog.DEFAULT_PLATFORM in catalog.PLATFORMS
    )
    assert options.default("bytecode") == DEFAULT_BYTECODE


# The flags that mean one thing for the image commands and another elsewhere: each use a row.
SHARED_FLAGS = {"--cuda", "--cpu", "--platform", "--op-source"}


@pytest.mark.parametrize("command", sorted(get_command(app).commands))  # type: ignore[attr-defined]
def test_every_commands_cuda_cpu_platform_and_op_source_is_a_row_of_the_table(command: str) -> None:
    rows = options.for_command(command)
    cli = _cli_options(command)
    for name, flags in cli.items():
        if set(flags) & SHARED_FLAGS:
            assert name in {o.name for o in rows}, (command, flags)
    for option in rows:
        assert option.name in cli, (command, option.name)


def test_a_garbled_boolean_variable_is_bad_input_naming_it() -> None:
    result = CliRunner().invoke(
        app, ["dockerfile", "--cpu", "--ops", "cpu_adam"], env={"IMAGEGEN_NUMPY": "maybe"}
    )
    assert result.exit_code == 2 and "IMAGEGEN_NUMPY" in result.output


def test_an_option_added_to_the_table_reaches_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    added = options.ImageOption(
        name="retries", flags=("--retries",), form="value", help="How often.",
        commands=frozenset({"probe", "build"}), docs_option="`--retries N`", docs_default="0",
        docs_meaning="retry a failed step", value_type=int,
        spec=False,
    )  # fmt: skip
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, added))
    seen: dict[str, Any] = {}

    @_options.table_options("probe")
    def command(image: SpecInput, retries: int | None = None) -> None:
        seen.update(image=image, retries=retries)

    probe = typer.Typer()
    probe.command()(command)
    result = CliRunner().invoke(probe, ["--retries", "3"])
    assert result.exit_code == 0, result.output
    assert seen == {"image": SpecInput(), "retries": 3}
    assert "--retries" in CliRunner().invoke(probe, ["--help"]).output
    assert "| `--retries N` (build) |  | 0 | retry a failed step |" not in options.markdown_table()
    assert "| `--retries N` (build) | | 0 | retry a failed step |" in options.markdown_table()


@dataclasses.dataclass(frozen=True)
class RetryingRun(run_choices.RunOptions):
    """RunOptions with a field for a new run option (the one edit the run's code makes)."""

    retries: int = dataclasses.field(default=0, metadata=run_choices._row("retries", abs))


def test_a_run_option_added_to_the_table_reaches_the_run_through_its_field_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    added = options.ImageOption(
        name="retries", flags=("--retries",), form="value", help="How often.",
        commands=frozenset({"probe"}), docs_option="`--retries N`", docs_meaning="retry a failed step",
        value_type=int, spec=False,
    )  # fmt: skip
    table = (*options.OPTIONS, added)
    monkeypatch.setattr(options, "OPTIONS", table)

    seen: list[Any] = []

    @_options.table_options("probe")
    def command(image: SpecInput, run: RetryingRun = RetryingRun()) -> None:  # names no run option
        seen.append(run)

    probe = typer.Typer()
    probe.command()(command)
    assert "--retries" in CliRunner().invoke(probe, ["--help"]).output
    result = CliRunner().invoke(probe, ["--retries", "-3"])
    assert result.exit_code == 0, result.output
    assert seen[-1].retries == 3 and seen[-1].verify is True  # converted; an absent row: the default
    assert CliRunner().invoke(probe, []).exit_code == 0 and seen[-1].retries == 0


def test_builds_run_options_arrive_as_one_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _seen_inputs(monkeypatch)
    runs: list[Any] = []
    real = run_choices.RunOptions.from_rows

    def record(values: Any, **decided: Any) -> Any:
        runs.append(real(values, **decided))
        return runs[-1]

    monkeypatch.setattr(run_choices.RunOptions, "from_rows", staticmethod(record))
    args = ["build", "--cpu", "--ops", "cpu_adam", "--max-size", "2GiB", "--source", str(tmp_path)]
    assert CliRunner().invoke(app, [*args, "--no-verify"]).exit_code == 2  # stopped at the spec
    assert len(seen) == 1
    assert (runs[-1].max_size, runs[-1].source, runs[-1].verify) == (2 * 2**30, tmp_path, False)
    result = CliRunner().invoke(app, ["build", "--cpu", "--ops", "cpu_adam", "--max-size", "lots"])
    assert result.exit_code == 2 and "--max-size" in result.output and len(seen) == 1  # before the spec


# Every option of every command is a row of the table, but these, each with why. Click adds
# --help when it parses (it is no parameter of a command), and a positional argument is no option.
NOT_ROWS: dict[str, str] = {
    "--json": "the output format of every command, one alias (commands/_options.JsonOption) whose "
    "callback tells the error handler to answer in JSON; no command's setting",
}


def _row_flags(option: options.ImageOption) -> set[str]:
    return set(option.flags[0].split("/") + list(option.flags[1:]))


def _not_from_the_table(command: str, params: list[Any]) -> list[str]:
    """The options among ``params`` (a command's click parameters) that are neither the table's
    row for ``command`` (by name and flags) nor a named exception."""
    rows = {option.name: _row_flags(option) for option in options.for_command(command)}
    return [
        param.opts[0]
        for param in params
        if param.param_type_name == "option"
        and rows.get(param.name) != set(param.opts) | set(param.secondary_opts)
        and param.opts[0] not in NOT_ROWS
    ]


@pytest.mark.parametrize("command", sorted(get_command(app).commands))  # type: ignore[attr-defined]
def test_every_option_of_every_command_is_a_row_or_a_named_exception(command: str) -> None:
    params = get_command(app).commands[command].params  # type: ignore[attr-defined]
    assert _not_from_the_table(command, params) == [], command


def test_each_row_has_a_name_of_its_own_and_no_command_takes_a_flag_twice() -> None:
    names = [option.name for option in options.OPTIONS]
    assert len(names) == len(set(names))  # BY_NAME and the commands' parameters go by name
    commands = {command for option in options.OPTIONS for command in option.commands}
    for command in commands:
        flags = [flag for option in options.for_command(command) for flag in _row_flags(option)]
        assert len(flags) == len(set(flags)), command


def test_a_commands_image_argument_is_left_as_it_is() -> None:
    # verify's and sbom's IMAGE is a positional argument named ``image``: only a SpecInput
    # parameter of that name takes the table's options of what the image is.
    seen: dict[str, Any] = {}

    @_options.table_options("sbom")
    def command(
        image: Annotated[str, typer.Argument(metavar="IMAGE")],
        provenance: bool = False,
        signature: bool = False,
        sbom_output: Path | None = None,
    ) -> None:
        seen.update(image=image, provenance=provenance, sbom_output=sbom_output)

    probe = typer.Typer(add_completion=False)
    probe.command()(command)
    result = CliRunner().invoke(probe, ["imagegen:cpu", "--provenance", "-o", "out.json"])
    assert result.exit_code == 0, result.output
    assert seen == {"image": "imagegen:cpu", "provenance": True, "sbom_output": Path("out.json")}
    params = get_command(probe).params
    assert [p.name for p in params if p.param_type_name == "argument"] == ["image"]


def test_a_hand_declared_option_is_found() -> None:
    @_options.table_options("matrix")
    def command(
        matrix_out: Path = Path("dockerfiles"),
        matrix_check: bool = False,
        op_sources: tuple[str, ...] = (),
        matrix_platforms: tuple[str, ...] = (),
        verbose: Annotated[bool, typer.Option("--verbose")] = False,
        json: _options.JsonOption = False,
    ) -> None: ...

    probe = typer.Typer(add_completion=False)  # one command: the app is that command
    probe.command()(command)
    params = get_command(probe).params
    assert _not_from_the_table("matrix", params) == ["--verbose"]
    # A parameter under a row's name but with other flags is declared by hand too.
    renamed = [p for p in params if p.name == "matrix_check"]
    renamed[0].opts = ["--verify-only"]
    assert _not_from_the_table("matrix", renamed) == ["--verify-only"]


def test_a_shown_default_is_the_rows_and_only_a_row_without_a_variable_shows_one() -> None:
    shown = [option for option in options.OPTIONS if option.show_default]
    assert shown and all(option.env_name is None and option.default is not None for option in shown)
    assert "[default: dockerfiles]" in CliRunner().invoke(app, ["matrix", "--help"]).output
    assert options.resolve({}, {}, "matrix")["matrix_out"] == Path("dockerfiles")
    assert "[default: 300.0]" in CliRunner().invoke(app, ["verify", "--help"]).output
    assert options.resolve({}, {}, "verify")["verify_timeout"] == 300.0
