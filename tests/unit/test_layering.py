"""The layering, locked by ruff's banned-import rules (op_builder/.ruff.toml, imagegen/.ruff.toml,
imagegen/engine/.ruff.toml): op_builder imports neither kernels nor imagegen, imagegen does not
import kernels, neither imports torch at module level, and only imagegen.engine imports the Docker
SDK or opens a client (imagegen.engine.client): the engine is imagegen's one door to Docker. Each
rule is shown failing on a file that breaks it, as ruff sees a file at that place
(``--stdin-filename``), and passing on the same code where it is allowed."""

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
        ("imagegen/proof/probe.py", "import docker\n", "TID251"),
        ("imagegen/oci/probe.py", "def f():\n    from docker.errors import APIError\n", "TID251"),
        ("imagegen/probe.py", "if TYPE_CHECKING:\n    import docker\n", "TID251"),  # for types too
        ("imagegen/runs/probe.py", "from imagegen.engine.client import docker_client\n", "TID251"),
        ("imagegen/verify/probe.py", "def f():\n    from imagegen.engine import client\n", "TID251"),
        ("imagegen/engine/probe.py", "import kernels\n", "TID251"),  # the engine keeps the other bans
        ("imagegen/engine/probe.py", "import torch\n", "TID253"),
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
        ("imagegen/engine/probe.py", "import docker\nfrom imagegen.engine.client import docker_client\n"),
        ("imagegen/engine/sub/probe.py", "def f():\n    from docker.types import DeviceRequest\n"),
        ("imagegen/proof/probe.py", "from imagegen.engine.images import inspect_local\n"),
        ("tests/integration/probe.py", "import docker\nfrom imagegen.engine.client import docker_client\n"),
    ],
)
def test_what_the_layers_allow_passes(place: str, code: str) -> None:
    assert not _violations(place, code)


def test_only_the_engine_talks_to_docker() -> None:
    """The rules above, held on imagegen's files as they are."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251", "--output-format",
         "concise", "imagegen"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
