"""No C++ error message of ours streams a tensor's sizes: shapes go through ``shape_text``
(kernels/includes/shape_text.h says why: formatting an IntArrayRef crashed JIT-built extensions
with torch 2.11.0+cu130 and GCC 13.3, turning a user's wrong shape into a segfault)."""

from __future__ import annotations

import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[3] / "kernels"
SOURCES = [p for ext in ("*.cpp", "*.h", "*.cu", "*.cuh") for p in KERNELS.rglob(ext)]
# A sizes() (or sizes of an optional: ->sizes()) passed as a message argument: after a comma,
# not compared, not wrapped in shape_text.
_STREAMED = re.compile(r",\s*(?!shape_text\()[\w>.\-*]*(?:\.|->)sizes\(\)\s*(?=[,)])")


def streamed_shapes(text: str) -> list[str]:
    return [match.group(0).strip(", \n") for match in _STREAMED.finditer(text)]


def test_the_check_finds_a_streamed_shape() -> None:
    bad = 'TORCH_CHECK(a.sizes() == b.sizes(), "a has shape ", a.sizes(), " but b ", b->sizes());'
    assert streamed_shapes(bad) == ["a.sizes()", "b->sizes()"]
    good = 'TORCH_CHECK(a.sizes() == b.sizes(), "a has shape ", shape_text(a.sizes()));'
    assert streamed_shapes(good) == []


def test_no_message_of_ours_streams_a_shape() -> None:
    assert SOURCES
    found = {str(p.relative_to(KERNELS)): streamed_shapes(p.read_text()) for p in SOURCES}
    assert {path: hits for path, hits in found.items() if hits} == {}
