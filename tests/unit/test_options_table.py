"""The options table (imagegen.options): each image option declared once, and everything else
made from it: the Typer options of dockerfile, build and bake, SpecInput's fields, the settings
table, the docs table, and one cascade (flag > IMAGEGEN_*) for every option with a variable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from imagegen import options
from imagegen import settings as imagegen_settings
from imagegen.cli import app
from imagegen.commands import _options
from imagegen.imagespec.spec import SpecInput
from op_builder import settings

REPO = Path(__file__).resolve().parents[2]


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
        else:  # bake's own --push (a registry) is not the table's build --push
            assert option.name not in cli or option.name == "push", option.name


def test_matrix_takes_the_tables_op_source() -> None:
    assert ("--op-source",) in _cli_options("matrix").values()


def test_spec_input_holds_the_tables_image_options_only() -> None:
    # Push and verify are how a run behaves, not what the image is: the push plan holds them.
    fields = {f.name for f in dataclasses.fields(SpecInput)}
    assert fields == {o.name for o in options.OPTIONS if o.spec}


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
def test_the_cascade_is_flag_then_variable_for_every_option(option: options.ImageOption) -> None:
    assert option.env_name is not None
    text, expected = SAMPLES.get(option.env_kind or "", ("a:b" if option.form == "repeat" else " x ", None))
    if expected is None:
        expected = ("a", "b") if option.form == "repeat" else "x"
    if option.name not in {f.name for f in dataclasses.fields(SpecInput)}:
        pytest.skip(f"{option.name} is a run option, read by its command")
    from_env = options.resolve(SpecInput(), {option.env_name: text})
    assert getattr(from_env, option.name) == expected
    flag: Any = ("c",) if option.form == "repeat" else (False if option.env_kind == "flag" else "flag")
    if option.form == "switch" and flag is False:
        return  # a switch not given is off: the variable fills it (above)
    given = options.resolve(SpecInput(**{option.name: flag}), {option.env_name: text})
    assert getattr(given, option.name) == flag
    # Unset (or empty, but for a boolean, where empty reads as off as in op_builder's switches):
    # nothing is filled, and the catalog's default comes later.
    assert options.resolve(SpecInput(), {}) == SpecInput()
    if option.env_kind != "flag":
        assert options.resolve(SpecInput(), {option.env_name: ""}) == SpecInput()


def test_a_garbled_boolean_variable_is_bad_input_naming_it() -> None:
    result = CliRunner().invoke(
        app, ["dockerfile", "--cpu", "--ops", "cpu_adam"], env={"IMAGEGEN_NUMPY": "maybe"}
    )
    assert result.exit_code == 2 and "IMAGEGEN_NUMPY" in result.output


def test_an_option_added_to_the_table_reaches_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    added = options.ImageOption(
        name="retries", flags=("--retries",), form="value", help="How often.", commands=frozenset({"probe"}),
        docs_option="`--retries N`", docs_default="0", docs_meaning="retry a failed step", value_type=int,
        spec=False,
    )  # fmt: skip
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, added))
    seen: dict[str, Any] = {}

    @_options.image_options("probe")
    def command(image: SpecInput, retries: int | None = None) -> None:
        seen.update(image=image, retries=retries)

    probe = typer.Typer()
    probe.command()(command)
    result = CliRunner().invoke(probe, ["--retries", "3"])
    assert result.exit_code == 0, result.output
    assert seen == {"image": SpecInput(), "retries": 3}
    assert "--retries" in CliRunner().invoke(probe, ["--help"]).output
    assert "| `--retries N` (probe) |  | 0 | retry a failed step |" not in options.markdown_table()
    assert "| `--retries N` (probe) | | 0 | retry a failed step |" in options.markdown_table()
