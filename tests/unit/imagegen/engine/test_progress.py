"""The build's live view (plain mode, as in CI)."""

from __future__ import annotations

import pytest

from imagegen.engine.progress import LogView


def test_plain_log_view_strips_colour_and_times_classic_steps(capsys: pytest.CaptureFixture[str]) -> None:
    view = LogView("classic", plain=True)
    view.feed("Step 1/2 : FROM x\n\x1b[91mkernels/csrc/a.cpp:1:1: error: y\n\x1b[0m")
    view.feed("Step 2/2 : RUN true")
    view.close()
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert view.lines[1] == "kernels/csrc/a.cpp:1:1: error: y"
    assert err.count("s)") == 2  # one timing line per step
