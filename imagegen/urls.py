"""URLs a user gives (``--torch-index``, ``--compile-cache``): what of them may be shown.

A URL's userinfo (``user:password@``) is a credential: it is never printed, rendered into a
Dockerfile or sealed into an image's proof (docs/imagegen.md, "Credentials in URLs"). ``redact``
hides it even in text that does not parse as a URL: a password with an unencoded ``/``, ``?``
or ``#`` makes ``urlsplit`` read part of it as the host, the port or the path, so everything
between ``://`` and the last ``@`` goes, whatever a parser would make of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REDACTED = "***"


def _userinfo_span(value: str) -> tuple[int, int] | None:
    """Where ``value``'s userinfo may be: from after ``://`` (or the start, without a scheme) to
    its last ``@``; None when it has no ``@`` there."""
    scheme_end = value.find("://")
    start = 0 if scheme_end < 0 else scheme_end + 3
    end = value.rfind("@")
    return (start, end) if end >= start else None


def has_userinfo(value: str) -> bool:
    """Whether ``value`` may carry a user or password (an ``@`` after its scheme)."""
    return _userinfo_span(value) is not None


def userinfo(value: str) -> str:
    """The text that may be ``value``'s userinfo ("" without one)."""
    span = _userinfo_span(value)
    return "" if span is None else value[span[0] : span[1]]


def redact(value: str) -> str:
    """``value`` with its userinfo, if any, as ``***``: ``https://***@host/simple``."""
    span = _userinfo_span(value)
    return value if span is None else value[: span[0]] + REDACTED + value[span[1] :]


# A URL in free text: a scheme, "://" (or ":/", as a path made of a URL shows it), then the word
# (no white space, quote or angle bracket) up to its last "@". Its userinfo is what lies between,
# up to the authority's last "@".
_URL_WITH_AT_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*:/+)([^\s'\"`<>]*)@")


def _masked(match: re.Match[str]) -> str:
    scheme, before_at = match.group(1), match.group(2)
    authority = before_at.split("/", 1)[0]
    if "/" in before_at and "@" in authority:  # user:password@host/path@ref: the path keeps its '@'
        at = authority.rfind("@")
        if ":" in authority[:at]:
            return f"{scheme}{REDACTED}@{before_at[at + 1 :]}@"
    # A password holds a ':' before any '/' of its own, unencoded. A user alone
    # ("ssh://USER@HOST") or a path's '@' ("git+https://host/repo@v1") is no password.
    elif ":" in authority:
        return f"{scheme}{REDACTED}@"
    return match.group(0)


def redact_in_text(text: str) -> str:
    """``text`` (a message, a log line) with the ``user:password`` of every ``scheme://...@`` URL
    in it as ``***``, whatever the scheme: the net under each message's own ``redact``."""
    return _URL_WITH_AT_RE.sub(_masked, text) if ":/" in text else text


def parse_problem(exc: ValueError) -> str:
    """What ``urlsplit`` (or ``.port``) found wrong, in words that never quote the URL: its own
    messages quote the port's text, which a password with a ``/`` in it becomes."""
    text = str(exc)
    if text.startswith("Port"):
        return "its port is not a number from 0 to 65535"
    if "IPv6" in text or "IPv4" in text:
        return "its host in brackets is not an IPv6 address closed by ']'"
    return "it does not parse as a URL"


@dataclass(frozen=True)
class Secret:
    """A value for a build secret only: shown as ``***`` by ``str`` and left out of ``repr``."""

    value: str = field(repr=False)

    def __str__(self) -> str:
        return REDACTED
