"""A user's first command in the image starts clean: nothing on stderr, and nothing hidden.

NumPy is in the runtime venv (nearly every job imports it), so torch has nothing to warn
about; no warning filter is installed into the image's Python, so a NumPy that fails to load
is still reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from imagegen.engine.sealed import sealed_container_options
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


def test_numpy_imports_and_a_numpy_that_fails_still_warns(
    cpu_image: dict[str, Any], docker_client: Any
) -> None:
    """torch's tensors convert to and from NumPy; no filter hides torch's warning about NumPy."""
    convert = (
        "import numpy, torch; a = numpy.arange(6.0).reshape(2, 3); t = torch.from_numpy(a) * 2; "
        "print(numpy.__version__, (t.numpy() == a * 2).all(), float(t.sum()))"
    )
    code, out, err = run_sealed(docker_client, ["python", "-c", convert])
    assert code == 0 and err == "", err[-3000:]
    version, equal, total = out.split()
    assert (equal, total) == ("True", "30.0") and version[0].isdigit()
    broken = "import sys; sys.modules['numpy'] = None; import torch"
    code, _, err = run_sealed(docker_client, ["python", "-c", broken])
    assert code == 0 and "UserWarning: Failed to initialize NumPy" in err, err[-3000:]


def test_no_pth_file_installs_a_warning_filter(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """site runs the `import` lines of every .pth file at every start: none may touch warnings.

    (The image built before NumPy was in it had imagegen-numpy-absent.pth, which this finds.)
    """
    probe = (
        "import glob, site; "
        "pth = sorted(f for p in site.getsitepackages() for f in glob.glob(p + '/*.pth')); "
        "print(*(f for f in pth if 'warnings' in open(f).read()))"
    )
    code, out, err = run_sealed(docker_client, ["python", "-c", probe])
    assert code == 0, err[-3000:]
    assert out.split() == [], f".pth files that touch warnings: {out}"
