"""SpecInput: what the image is, as the options cascade found it, drawn from the options table.

Its options are the table's rows with ``spec=True`` (``imagegen.options``), read when an input is
made: an image option is a row there and its use in ``build_spec``, never a field declared here
too. Each option not given takes its row's default; a name that is no image option is refused
(TypeError, as a dataclass refuses an unknown field), so a misspelt keyword cannot pass unseen.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError
from types import MappingProxyType
from typing import Any, NoReturn

from imagegen import options


def image_option_names(command: str = "") -> tuple[str, ...]:
    """The names of the image options (of ``command``'s, when one is named), in table order."""
    rows = options.for_command(command) if command else options.OPTIONS
    return tuple(option.name for option in rows if option.spec)


class SpecInput:
    """One value per image option of the table; None: no value, for the catalog to choose where
    the target is known (``imagegen.imagespec.spec.build_spec``).

    ``options.resolve`` fills it from the command line (flag > ``IMAGEGEN_*`` > default), once per
    command; ``SpecInput(...)`` in code is that with the flags given and no variable. Read an
    option as an attribute (``inp.torch``); frozen, compared and hashed by its values.
    """

    __slots__ = ("_values",)
    _values: Mapping[str, Any]

    def __init__(self, **given: Any) -> None:
        names = image_option_names()
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"no image option {unknown} in the options table")
        values = {name: options.default(name) for name in names}
        values.update(given)
        object.__setattr__(self, "_values", MappingProxyType(values))

    def __getattr__(self, name: str) -> Any:
        # Called only for what is not a slot: the options.
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"SpecInput has no image option {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise FrozenInstanceError(f"cannot assign to {name!r}: a SpecInput is frozen; use replace()")

    def __delattr__(self, name: str) -> NoReturn:
        raise FrozenInstanceError(f"cannot delete {name!r}: a SpecInput is frozen")

    def replace(self, **changes: Any) -> SpecInput:
        """A copy with ``changes`` (as ``dataclasses.replace``; an unknown name is a TypeError)."""
        return SpecInput(**{**self._values, **changes})

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self._values.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpecInput):
            return NotImplemented
        return dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        given = ", ".join(f"{name}={value!r}" for name, value in self._values.items())
        return f"SpecInput({given})"


def spec_input(env: Mapping[str, str], command: str = "build", **flags: Any) -> SpecInput:
    """SpecInput for code that has no command line (benches, tests): ``flags`` as the flags
    given, then the cascade (``options.resolve``) over ``env`` and the defaults."""
    names = image_option_names(command)
    unknown = set(flags) - set(names)
    if unknown:
        raise TypeError(f"{command} has no image option {sorted(unknown)}")
    values = options.resolve(flags, env, command)
    return SpecInput(**{name: values[name] for name in names})
