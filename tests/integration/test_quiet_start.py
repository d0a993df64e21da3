"""A user's first command in the image starts clean: nothing on stderr.

torch warns at every import when numpy is absent, and the image leaves numpy out; the
build writes a filter for exactly that warning into the venv (imagegen/templates/Dockerfile.j2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from imagegen.verify import sealed_container_options
from tests.integration.conftest import CPU_TAG

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]


def run_sealed(client: Any, command: Sequence[str]) -> tuple[int, str, str]:
    """``command`` in a sealed container of the session image: (exit code, stdout, stderr)."""
    container = client.containers.create(CPU_TAG, command=list(command), **sealed_container_options())
    try:
        container.start()
        status = container.wait(timeout=300)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return int(status["StatusCode"]), out, err
    finally:
        container.remove(force=True)


def test_importing_torch_and_the_ops_prints_nothing(cpu_image: dict[str, Any], docker_client: Any) -> None:
    code, out, err = run_sealed(docker_client, ["python", "-c", "import torch, kernels.optim"])
    assert code == 0, err[-3000:]
    assert err == "" and out == ""


def test_numpy_is_absent_and_other_numpy_failures_still_warn(
    cpu_image: dict[str, Any], docker_client: Any
) -> None:
    """The filter is narrow: a numpy that fails to load some other way is still reported."""
    probe = "import importlib.util as u; print(u.find_spec('numpy'))"
    code, out, err = run_sealed(docker_client, ["python", "-c", probe])
    assert (code, out.strip()) == (0, "None"), err[-3000:]
    broken = "import sys; sys.modules['numpy'] = None; import torch"
    code, _, err = run_sealed(docker_client, ["python", "-c", broken])
    assert code == 0 and "UserWarning: Failed to initialize NumPy" in err, err[-3000:]
