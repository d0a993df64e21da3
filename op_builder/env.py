"""Reading switches from an environment mapping: a leaf module every other one may import.

Functions take the environment as a ``Mapping`` (callers pass ``os.environ``; tests pass
dicts) and never write it.
"""

from __future__ import annotations

from collections.abc import Mapping

from op_builder.errors import BadInputError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def env_flag(env: Mapping[str, str], name: str) -> bool | None:
    """True/False for a set boolean variable, None when unset; BadInputError when garbled."""
    if name not in env:
        return None
    value = env[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadInputError(f"{name}={env[name]!r} is not a boolean", hint=f"use {name}=1 or {name}=0")


def env_positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole number from ``env``, ``default`` when unset; BadInputError when garbled."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise BadInputError(
            f"{name}={text!r} is not a positive integer", hint=f"for example {name}={default}"
        )
    return int(text)
