"""What one option of the commands is (``ImageOption``): its flags and form, help, the commands
that take it, its default value and its check, its ``IMAGEGEN_*`` variable and how that is read,
its docs row; and the names the table uses for help panels and commands."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from op_builder.env import env_flag
from op_builder.op_sources import split_dirs
from op_builder.settings import Kind, Setting

ENV_PREFIX = "IMAGEGEN_"
# Where docs/imagegen.md holds the options table (scripts/settings_tables.py writes it).
DOCS_HEADING = "### Options of `dockerfile` and `build`"

# How the flag reads on the command line: a value (``--torch 2.5``), a switch (``--cpu``), an
# on/off pair (``--buildkit/--no-buildkit``) or a value given several times (``--op-source``).
Form = Literal["value", "switch", "toggle", "repeat"]

# The help panels of ``--help``.
TARGET = "Target (exactly one)"
IMAGE = "Image"
SOURCES = "Sources and network"
BUILD = "Build"

# Which commands take an option.
DOCKERFILE, BUILD_CMD, BAKE, MATRIX = "dockerfile", "build", "bake", "matrix"
OPS, STANDINS, NEW_OP = "ops", "standins", "new-op"
VERIFY, CATALOG, SBOM = "verify", "catalog", "sbom"
_IMAGE_CMDS = frozenset({DOCKERFILE, BUILD_CMD})
_WITH_BAKE = frozenset({DOCKERFILE, BUILD_CMD, BAKE})
# The commands whose options docs/imagegen.md's options table lists (the others' are in --help).
DOCS_COMMANDS = _WITH_BAKE


@dataclass(frozen=True)
class ImageOption:
    """One option. ``spec``: it is a field of ``SpecInput`` (what the image is, resolved into
    the ImageSpec); otherwise it is how a run behaves, handed to the command as it is."""

    name: str  # the parameter's and SpecInput field's name
    flags: tuple[str, ...]  # ("--tag", "-t"); a toggle: ("--buildkit/--no-buildkit",)
    form: Form
    help: str  # one line of --help ("(env: ...)" is added from ``env_kind``)
    commands: frozenset[str]
    # What a command gets when neither the flag nor the variable gives a value (the cascade's
    # last step, ``imagegen.options.resolve``). None: no value, and for what the image is, the
    # catalog's choice where the target is known (imagegen.imagespec.spec.build_spec).
    default: Any = None
    command_defaults: tuple[tuple[str, Any], ...] = ()  # another default for one command
    # The function that checks this value alone, as "module.function" of imagegen.imagespec
    # (imagegen.imagespec.spec.CHECK_MODULES): it takes the value and returns it checked, or raises
    # BadInputError (exit 2). A name, as this floor cannot import that one; a test resolves each.
    # Checks that need other options (the target's, the platform's) are build_spec's rules.
    check: str = ""
    docs_option: str = ""  # the docs table's option cell ("": a command's own, not in that table)
    docs_default: str = ""  # words, where the default needs them; "": written from ``default``
    docs_meaning: str = ""
    panel: str | None = None
    metavar: str | None = None
    env_kind: Kind | None = None  # None: no IMAGEGEN_* variable
    env_suffix: str = ""  # IMAGEGEN_<suffix>; default: the name upper-cased
    env_note: str = ""  # after the variable in the docs ("folders separated by `:`")
    value_type: type = str  # str, int, float or Path (a value's type as typed)
    spec: bool = True
    # --help shows ``default`` ("[default: dockerfiles]"): the command's parameter then defaults to
    # it, so a flag left off reads as given at that value. Only for a row without a variable (the
    # variable would never be read); tests/unit/imagegen/options holds that.
    show_default: bool = False

    def default_for(self, command: str) -> Any:
        return dict(self.command_defaults).get(command, self.default)

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def env_name(self) -> str | None:
        if self.env_kind is None:
            return None
        return ENV_PREFIX + (self.env_suffix or self.name.upper())

    @functools.cached_property
    def setting(self) -> Setting | None:
        """Its ``IMAGEGEN_*`` variable, as ``imagegen.settings`` lists it."""
        if self.env_name is None or self.env_kind is None:
            return None
        return Setting(
            self.env_name,
            self.env_kind,
            "as the flag",
            f"`{self.flag}` when the flag is not given",
            "imagegen",
        )

    def help_text(self) -> str:
        if self.env_name is None:
            return self.help
        shown = f"{self.env_name}=1" if self.env_kind == "flag" and self.form == "switch" else self.env_name
        note = self.env_note.strip("()").replace("`", "")
        return f"{self.help} (env: {shown}{', ' + note if note else ''})"

    def docs_row(self) -> str:
        env = ""
        if self.env_name is not None:
            env = (
                f"`{self.env_name}=1`"
                if self.env_kind == "flag" and self.form == "switch"
                else f"`{self.env_name}`"
            )
            env += f" {self.env_note}" if self.env_note else ""
        commands = (
            ""
            if self.commands >= _IMAGE_CMDS
            else " (" + ", ".join(sorted(self.commands & DOCS_COMMANDS)) + ")"
        )
        default = self.docs_default or shown_default(self.default)
        default += "".join(f"; `{cmd}`: {shown_default(value)}" for cmd, value in self.command_defaults)
        cells = (self.docs_option + commands, env, default, self.docs_meaning)
        return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"

    def from_env(self, env: Mapping[str, str]) -> Any:
        """The option's value from its variable: None when unset or empty (and for no variable)."""
        if self.env_name is None:
            return None
        if self.env_kind == "flag":
            return env_flag(env, self.env_name)  # the same spellings as op_builder's DS_* switches
        text = env.get(self.env_name, "").strip()
        if self.form == "repeat":
            return split_dirs(text) or None
        return text or None  # a number stays text: its check says what is wrong with it


def shown_default(value: Any) -> str:
    """A default value as the docs' table shows it: ``off`` for a switch, ``none`` for no value."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"
