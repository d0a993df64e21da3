"""Each image the compatibility results record points at a section that exists: its evidence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagegen.compat import results

REPO = Path(__file__).resolve().parents[4]


def slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    return {slug(line.lstrip("#")) for line in markdown.splitlines() if line.startswith("#")}


def test_slug_is_githubs() -> None:
    assert (
        slug(" CUDA 13.2, torch 2.15.0 (its own build) (2026-11-23)")
        == "cuda-132-torch-2150-its-own-build-2026-11-23"
    )
    assert slug("arm64 CPU image, cross-compiled: `bench/arm64_cross.py`") == (
        "arm64-cpu-image-cross-compiled-bencharm64_crosspy"
    )


@pytest.mark.parametrize(
    "image", results.load().get("images", []), ids=lambda i: f"{i['target']}-{i['date']}"
)
def test_every_recorded_image_points_at_an_existing_section(image: dict[str, str]) -> None:
    document, _, anchor = image["evidence"].partition("#")
    path = REPO / document
    assert path.is_file(), document
    assert anchor in anchors(path.read_text()), f"{image['evidence']}: no such section"


def test_a_missing_section_is_found() -> None:
    assert "no-such-section" not in anchors((REPO / "docs" / "benchmarks.md").read_text())
