"""Every option of the image commands, declared once (``imagegen.options.declared``): its flag,
how it is read, its ``IMAGEGEN_*`` variable, its help, the commands that take it and its row in
docs/imagegen.md.

``dockerfile``, ``build``, ``bake`` and ``matrix`` get their image options from this table
(``imagegen.commands._options.image_options``), ``imagegen.settings`` its ``IMAGEGEN_*``
variables, scripts/settings_tables.py the docs' options table; ``resolve`` is the one cascade,
**flag > IMAGEGEN_* variable**, for every option that has a variable (the catalog's defaults
come after, in ``imagegen.imagespec``, where the target is known). Adding an option touches the
table, the code that uses it and its test.

Data and one pure function: the ground floor, importing nothing of imagegen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from imagegen.options.declared import OPTIONS as OPTIONS
from imagegen.options.model import BUILD as BUILD
from imagegen.options.model import DOCS_HEADING as DOCS_HEADING
from imagegen.options.model import ENV_PREFIX as ENV_PREFIX
from imagegen.options.model import IMAGE as IMAGE
from imagegen.options.model import SOURCES as SOURCES
from imagegen.options.model import TARGET as TARGET
from imagegen.options.model import ImageOption as ImageOption
from op_builder.settings import Setting

BY_NAME: Mapping[str, ImageOption] = {option.name: option for option in OPTIONS}


def for_command(command: str) -> tuple[ImageOption, ...]:
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
    return header + "".join(option.docs_row() + "\n" for option in OPTIONS)


def _given(option: ImageOption, value: Any) -> bool:
    """Whether the flag was given: None (and a switch left off, a repeat never given) is not."""
    if value is None:
        return False
    if option.form == "switch" and value is False:
        return False
    return not (option.form == "repeat" and not value)


T = TypeVar("T")


def resolve(values: T, env: Mapping[str, str]) -> T:
    """The cascade, once for every option: the flag when given, else its ``IMAGEGEN_*`` variable.

    ``values`` is a dataclass whose fields are options of this table (``SpecInput``); a field
    the flag left unset takes the variable's value (a switch or flag variable as a boolean,
    folders split on ``:``, anything else as stripped text), else keeps its unset value for the
    catalog's default to fill later. A garbled boolean variable is bad input naming it.
    """
    filled: dict[str, Any] = {}
    for field in dataclasses.fields(values):  # type: ignore[arg-type]
        option = BY_NAME.get(field.name)
        if option is None:
            continue
        value = getattr(values, field.name)
        if not _given(option, value):
            from_env = option.from_env(env)
            if from_env is not None:
                filled[field.name] = tuple(from_env) if option.form == "repeat" else from_env
    return dataclasses.replace(values, **filled) if filled else values  # type: ignore[type-var]
