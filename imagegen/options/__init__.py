"""Every option of the commands, declared once (``imagegen.options.declared`` and the modules it
gathers): its flag, how it is read, its ``IMAGEGEN_*`` variable, its help, the commands that take
it, its default value, the check of its value and its row in docs/imagegen.md.

The commands get their options from this table (``imagegen.commands._options.table_options``),
``imagegen.settings`` its ``IMAGEGEN_*`` variables, scripts/settings_tables.py the docs' options
table. ``resolve`` is the one cascade, **flag > IMAGEGEN_* variable > the row's default**, run
once per command, where the command's options are parsed. What the catalog decides (the Python
and torch of the target, its bases) comes after, in ``imagegen.imagespec.spec.build_spec``, where
the target is known: such a row has no default value, and words in its docs cell instead.

Adding an option:

1. Add its ``ImageOption`` to the table (declared.py, or the module of its theme): flags, form,
   help, commands, ``default``, ``check`` (the imagespec function that checks the value alone, by
   name) and its docs cells; ``env_kind`` to give it an ``IMAGEGEN_*`` variable.
2. An option of what the image is (``spec=True``) also gets a field of
   ``imagegen.imagespec.spec.SpecInput``, whose default is read from the row; a run option
   (``spec=False``) a parameter of the commands that take it, under its name.
3. Use it where it acts (a rule in ``build_spec`` when it joins other options, the renderer...).
4. Test it, and run scripts/settings_tables.py (the settings and docs tables).

Data and pure functions: the ground floor, importing nothing of imagegen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagegen.options.declared import OPTIONS as OPTIONS
from imagegen.options.model import BUILD as BUILD
from imagegen.options.model import DOCS_COMMANDS as DOCS_COMMANDS
from imagegen.options.model import DOCS_HEADING as DOCS_HEADING
from imagegen.options.model import ENV_PREFIX as ENV_PREFIX
from imagegen.options.model import IMAGE as IMAGE
from imagegen.options.model import SOURCES as SOURCES
from imagegen.options.model import TARGET as TARGET
from imagegen.options.model import ImageOption as ImageOption
from op_builder.settings import Setting

BY_NAME: Mapping[str, ImageOption] = {option.name: option for option in OPTIONS}


def for_command(command: str) -> tuple[ImageOption, ...]:
    # OPTIONS, read when called: a test may add a row.
    return tuple(option for option in OPTIONS if command in option.commands)


def env_settings() -> tuple[Setting, ...]:
    """The ``IMAGEGEN_*`` variable of every option that has one, in table order."""
    return tuple(option.setting for option in OPTIONS if option.setting is not None)


def setting(name: str) -> Setting:
    found = BY_NAME[name].setting
    assert found is not None, name
    return found


def markdown_table() -> str:
    """docs/imagegen.md's options table (scripts/settings_tables.py writes it there)."""
    header = "| option | environment | default | meaning |\n|---|---|---|---|\n"
    rows = (option for option in OPTIONS if option.commands & DOCS_COMMANDS)
    return header + "".join(option.docs_row() + "\n" for option in rows)


def default(name: str, command: str = "") -> Any:
    """The value the option ``name`` takes when neither its flag nor its variable gives one."""
    return BY_NAME[name].default_for(command)


def _given(option: ImageOption, value: Any) -> bool:
    """Whether the flag was given: None (and a switch left off, a repeat never given) is not."""
    if value is None:
        return False
    if option.form == "switch" and value is False:
        return False
    return not (option.form == "repeat" and not value)


def resolve(flags: Mapping[str, Any], env: Mapping[str, str], command: str) -> dict[str, Any]:
    """The cascade, once for every option of ``command``: the flag when given, else its
    ``IMAGEGEN_*`` variable, else the row's default for that command.

    ``flags`` holds the values as parsed (an option missing from it was not given); the answer
    holds every option of the command. A variable is read as its kind says (a switch or flag
    variable as a boolean, folders split on ``:``, anything else as stripped text, a number too:
    its check says what is wrong with it). A garbled boolean variable is bad input naming it.
    """
    values: dict[str, Any] = {}
    for option in for_command(command):
        value = flags.get(option.name)
        if not _given(option, value):
            from_env = option.from_env(env)
            value = option.default_for(command) if from_env is None else from_env
        values[option.name] = tuple(value or ()) if option.form == "repeat" else value
    return values
