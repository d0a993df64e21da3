"""The layering, locked by ruff's banned-import rules (op_builder/.ruff.toml, imagegen/.ruff.toml):
op_builder imports neither kernels nor imagegen, imagegen does not import kernels, and neither
imports torch at module level. Each rule is shown failing on a file that breaks it, as ruff sees
a file at that place (``--stdin-filename``), and passing on the same code where it is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _violations(place: str, code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "TID", "--output-format", "concise",
         "--stdin-filename", place, "-"],
        input=code, capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return {line.split()[1] for line in done.stdout.splitlines() if line.startswith(place)}


@pytest.mark.parametrize(
    ("place", "code", "rule"),
    [
        ("op_builder/probe.py", "import kernels\n", "TID251"),
        ("op_builder/probe.py", "from kernels.optim import CPUAdam\n", "TID251"),
        ("op_builder/probe.py", "def f():\n    from kernels import optim\n", "TID251"),  # deferred too
        ("op_builder/probe.py", "from imagegen import log\n", "TID251"),
        ("op_builder/probe.py", "import torch\n", "TID253"),
        ("op_builder/selftest/runner.py", "from torch import Tensor\n", "TID253"),
        ("imagegen/probe.py", "import torch\n", "TID253"),
        ("imagegen/building/probe.py", "from kernels.optim import CPUAdam\n", "TID251"),
    ],
)
def test_a_banned_import_fails(place: str, code: str, rule: str) -> None:
    assert rule in _violations(place, code)


@pytest.mark.parametrize(
    ("place", "code"),
    [
        ("op_builder/probe.py", "def f():\n    import torch\n"),  # torch inside a function
        ("op_builder/selftest/harness.py", "import torch\n"),  # the harness, imported lazily
        ("kernels/optim/probe.py", "import torch\nfrom op_builder import CPUOpBuilder\n"),
        ("imagegen/probe.py", "from op_builder.registry import ALL_OPS\n"),
        ("tests/unit/probe.py", "import torch\nimport kernels\n"),
    ],
)
def test_what_the_layers_allow_passes(place: str, code: str) -> None:
    assert not _violations(place, code)
