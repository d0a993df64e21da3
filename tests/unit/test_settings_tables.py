"""One table of settings per package: the docs' tables come from it, readers use its names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagegen import settings as imagegen_settings
from op_builder import settings
from op_builder.errors import BadInputError
from op_builder.plan import requested_ops
from op_builder.settings import Setting

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Environment variables"

# A reader that names a variable by a string literal instead of the settings table.
LITERAL_READ = re.compile(
    r"""(?:env(?:iron)?\.get\(|env\[|env_flag\(env, |env_positive_int\(env, )["']([A-Z_]+)["']"""
)
# Read only to find tools and the home folder, as every program does: not settings.
NOT_SETTINGS = frozenset({"PATH", "HOME"})
PACKAGES = ("op_builder", "imagegen", "kernels")


def _page(name: str) -> str:
    return (REPO / name).read_text()


def test_the_readme_table_is_the_op_builder_settings() -> None:
    assert settings.table_under(_page("README.md"), HEADING) == settings.markdown_table(), (
        "run scripts/settings_tables.py"
    )


def test_the_imagegen_page_table_is_the_imagegen_settings() -> None:
    page = _page("docs/imagegen.md")
    assert settings.table_under(page, HEADING) == imagegen_settings.markdown_table(), (
        "run scripts/settings_tables.py"
    )


def test_a_variable_added_to_the_settings_but_not_the_readme_fails() -> None:
    extra = Setting("DS_NEW_SWITCH", "flag", "unset", "something new")
    readme = _page("README.md")
    assert settings.table_under(readme, HEADING) != settings.markdown_table((*settings.SETTINGS, extra))
    # ...and regenerating the page brings it back in step.
    regenerated = settings.with_table(readme, HEADING, settings.markdown_table((*settings.SETTINGS, extra)))
    assert "| `DS_NEW_SWITCH` | flag | unset | something new |" in settings.table_under(regenerated, HEADING)
    assert regenerated.count(HEADING) == 1


def test_a_row_edited_by_hand_in_the_readme_fails() -> None:
    readme = _page("README.md").replace("| `DS_CPU_NATIVE` | flag |", "| `DS_CPU_NATIVE` | bool |")
    assert settings.table_under(readme, HEADING) != settings.markdown_table()


def test_a_page_without_the_heading_has_no_table_and_cannot_be_regenerated() -> None:
    assert settings.table_under("# Title\n\n| a |\n", HEADING) == ""
    with pytest.raises(ValueError, match="no table under"):
        settings.with_table("# Title\n", HEADING, settings.markdown_table())


@pytest.mark.parametrize("table", [settings.SETTINGS, imagegen_settings.SETTINGS])
def test_names_are_unique_and_every_setting_is_described(table: tuple[Setting, ...]) -> None:
    names = [s.name for s in table]
    assert len(names) == len(set(names))
    assert all(s.meaning and s.default for s in table)


def test_every_imagegen_variable_of_the_options_table_is_a_setting_and_back() -> None:
    options = settings.table_under(_page("docs/imagegen.md"), "### Options of `dockerfile` and `build`")
    documented = set(re.findall(r"`(IMAGEGEN_[A-Z_]+)", options))
    assert documented == {s.name for s in imagegen_settings.OPTIONS}


def test_the_flag_each_option_variable_stands_in_for_is_in_the_options_table() -> None:
    options = settings.table_under(_page("docs/imagegen.md"), "### Options of `dockerfile` and `build`")
    for setting in imagegen_settings.OPTIONS:
        flag = re.match(r"`(--[a-z-]+)", setting.meaning)
        assert flag is not None and flag.group(1) in options, setting


def test_build_settings_are_never_unknown_ops_and_a_near_miss_gets_a_suggestion() -> None:
    assert requested_ops({settings.BUILD_OPS.name: "1"}) == (True, {})
    with pytest.raises(BadInputError) as caught:
        requested_ops({"DS_BUILD_OPZ": "1"})
    assert caught.value.hint is not None and "DS_BUILD_OPS" in caught.value.hint
    assert settings.build_variable("cpu_adam") == "DS_BUILD_CPU_ADAM"


def _literal_reads(text: str) -> list[str]:
    return [name for name in LITERAL_READ.findall(text) if name not in NOT_SETTINGS]


def test_the_literal_read_check_catches_a_reader_that_names_a_variable() -> None:
    assert _literal_reads('x = env.get("DS_DISABLE_JIT") == "1"\n')
    assert _literal_reads("flag = env_flag(env, 'DS_CPU_NATIVE')\n")
    assert not _literal_reads("x = env.get(settings.DISABLE_JIT.name)\n")
    assert not _literal_reads('found = shutil.which("nvcc", path=env.get("PATH"))\n')


def test_readers_name_variables_through_the_settings_tables() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "settings.py":
                continue
            found += [f"{path.relative_to(REPO)}: {hit}" for hit in _literal_reads(path.read_text())]
    assert not found, "read these through op_builder.settings / imagegen.settings:\n" + "\n".join(found)


@pytest.mark.parametrize("table", [settings.SETTINGS, imagegen_settings.SETTINGS])
def test_every_setting_is_read_somewhere(table: tuple[Setting, ...]) -> None:
    """No row for a variable nothing reads: each name (or its constant) appears in the code."""
    code = "\n".join(
        p.read_text()
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if p.name != "settings.py"
    )
    module = settings if table is settings.SETTINGS else imagegen_settings
    # The options' IMAGEGEN_* variables are all read by the one cascade (imagegen.options.resolve),
    # which tests/unit/imagegen/options/test_options_table.py runs for each of them.
    for setting in (s for s in table if s not in imagegen_settings.OPTIONS):
        # Its constant, or a group of them (CA_BUNDLES) other than the whole table.
        constants = [
            k
            for k, v in vars(module).items()
            if v is setting or (isinstance(v, tuple) and setting in v and k not in ("SETTINGS", "OPTIONS"))
        ]
        used = setting.name in code or any(f"settings.{c}" in code for c in constants)
        assert used or setting.name.endswith("<OP>"), setting.name
