"""What a test that builds an op both ways from one source (as its builder declares it: a stable
module here; and per torch: ATen + pybind11) reads back from the child process that built them."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from op_builder.stable_abi import check_module


def both_ways(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The child's last line, ``{"declared": {...}, "per_torch": {...}}``, once it is held that the
    child ran, that the declared build is the stable module and the other is not, and that the
    stable one keeps to torch 2.10's C shim and CPython's limited API (it loads on every torch
    from 2.10 on)."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert result["declared"]["stable"] is True and result["per_torch"]["stable"] is False
    report = check_module(result["declared"]["file"], "2.10")
    assert report.ok, report.describe()
    return result
