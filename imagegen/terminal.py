"""What may reach a user's terminal: messages made inert, once, where they are printed.

A message can quote what a registry answered, what an image printed or what a user typed, and
any of these can hold control characters: an escape sequence that clears the screen or recolours
it, a carriage return that overwrites the line, a bell. ``clean`` drops escape sequences (CSI,
OSC, the two-byte ones), turns CR LF into LF and writes any other control character (Unicode
category Cc but newline and tab: a lone ESC, CR, BEL, NUL, C1) as its Python escape (``\\x07``).
It also hides the userinfo of any ``scheme://user:password@`` URL in the text, whatever the
scheme (``imagegen.urls.redact_in_text``): a credential must not reach a terminal even from a
message that forgot to redact it. The CLI's error report, the log lines and the result console
go through it; the error document is cleaned too, and every other JSON document (which
``json.dumps`` escapes) has its URLs' passwords hidden.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from imagegen.urls import redact_in_text

# ECMA-48: CSI (ESC [ or the C1 byte 0x9b) parameters, intermediates, final byte; OSC (ESC ] or
# 0x9d) up to BEL or ST; then any other two-byte escape (ESC and one byte from 0x40 to 0x5f, or
# ESC with an intermediate and a final byte, as character-set selections are).
_ESCAPE_SEQUENCE_RE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-~]"
)
_KEPT = frozenset("\n\t")


def _visible(char: str) -> str:
    if char in _KEPT or unicodedata.category(char) != "Cc":
        return char
    return ascii(char)[1:-1]  # '\x07', '\r', '\x1b', '\x9b'


def clean(text: str) -> str:
    """``text`` as a terminal may show it: no escape sequence, no other control character but
    newline and tab, no URL's user or password."""
    text = _ESCAPE_SEQUENCE_RE.sub("", text).replace("\r\n", "\n")
    if any(c not in _KEPT and unicodedata.category(c) == "Cc" for c in text):
        text = "".join(_visible(c) for c in text)
    return redact_in_text(text)


def clean_document(value: Any) -> Any:
    """A JSON-ready value with each of its strings ``clean``: the ``{"error": ...}`` document
    says what the text report says."""
    return _each_string(value, clean)


def redact_document(value: Any) -> Any:
    """A JSON-ready value with no URL's password in any of its strings (``json.dumps`` escapes
    control characters itself, and a result keeps them as data)."""
    return _each_string(value, redact_in_text)


def _each_string(value: Any, change: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: _each_string(item, change) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_each_string(item, change) for item in value]
    return value


class CleanConsole(Console):
    """A rich Console that prints ``clean`` text. A string (printed, or a table's cell) is cleaned
    before rich lays it out, so a URL is whole when its password is hidden and widths hold; any
    other renderable's text segments are cleaned as they are rendered (rich's own styles and
    control segments, the cursor moves of a live display, pass as they are)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(clean(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and segment.text:
                cleaned = clean(segment.text)
                if cleaned != segment.text:
                    yield Segment(cleaned, segment.style)
                    continue
            yield segment
