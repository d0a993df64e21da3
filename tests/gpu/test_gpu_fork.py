"""Loading our ops creates no CUDA context, so the process can still fork children that use
the GPU (DeepSpeed's users lost ``fork()`` to an op load that initialised CUDA,
deepspeed#7918).

Each check runs in a fresh interpreter: this pytest process has long since initialised CUDA.
There, every GPU op is loaded (built ahead of time or JIT, as the checkout has it) after
importing the three op packages; then torch must still report CUDA uninitialised, and a forked
child must run one of our kernels (FusedAdam, ``use_kernel=True``) and match torch's AdamW on
the same numbers. The GPU list that loading read through NVML must be torch's own. A second
run initialises the driver before forking, as the load must not, and its child must fail: the
check can tell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from op_builder.registry import ALL_OPS

GPU_OPS = tuple(name for name, builder in ALL_OPS.items() if builder.target == "gpu")
REPO = Path(__file__).resolve().parents[2]

_CHILD_USES_THE_GPU = r"""
import json, os, sys
import torch
import kernels.optim, kernels.quantization, kernels.transformer
from op_builder import get_builder
from op_builder.nvml import visible_gpus

poison = sys.argv[1] == "poison"
for op in sys.argv[2:]:
    get_builder(op).load()
report = {"initialized_after_load": torch.cuda.is_initialized()}
if poison:  # what an op load must not do: cudaGetDeviceCount initialises the driver
    torch._C._cuda_getDeviceCount()
nvml = visible_gpus(os.environ)
report["initialized_after_nvml"] = torch.cuda.is_initialized()

pid = os.fork()
if pid == 0:
    try:
        from kernels.optim.fused import FusedAdam

        start = torch.linspace(-1, 1, 4099, device="cuda")
        grad = torch.linspace(0.5, -0.25, 4099, device="cuda")
        ours = torch.nn.Parameter(start.clone())
        theirs = torch.nn.Parameter(start.clone())
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        FusedAdam([ours], lr=1e-2, weight_decay=0.1, use_kernel=True).step()
        torch.optim.AdamW([theirs], lr=1e-2, weight_decay=0.1).step()
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-5, atol=1e-6)
        os._exit(0)
    except BaseException as exc:  # the child reports, then leaves without running the parent's code
        print(f"child: {exc!r}", file=sys.stderr, flush=True)
        os._exit(3)
_, status = os.waitpid(pid, 0)
report["child_exit"] = os.waitstatus_to_exitcode(status)
report["nvml"] = None if nvml is None else [[g.name, list(g.capability)] for g in nvml]
report["torch"] = [
    [torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i))]
    for i in range(torch.cuda.device_count())
]
print(json.dumps(report))
"""


def _run(mode: str) -> tuple[dict[str, Any], str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # As a user's process runs by default: torch's own NVML switch unset.
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    env["PYTHONPATH"] = path
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_USES_THE_GPU, mode, *GPU_OPS],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


# Loading JIT-builds any op not built yet (about 30 s each on 16 cores): more than the tier's
# per-test limit when none is.
@pytest.mark.timeout(900)
def test_loading_every_gpu_op_leaves_cuda_uninitialised_and_fork_usable() -> None:
    report, stderr = _run("load")
    assert report["initialized_after_load"] is False, "loading the ops initialised CUDA"
    assert report["initialized_after_nvml"] is False
    assert report["child_exit"] == 0, f"a forked child could not use the GPU: {stderr[-3000:]}"
    # NVML answered (this machine has the driver's libraries) and saw what CUDA sees.
    assert report["nvml"] == report["torch"]


@pytest.mark.timeout(900)
def test_the_child_check_catches_a_driver_initialised_before_fork() -> None:
    # torch's own flag stays False after cudaGetDeviceCount: only the child's launch shows the
    # harm, which is why the test above forks rather than trusting is_initialized() alone.
    report, stderr = _run("poison")
    assert report["initialized_after_load"] is False
    assert report["child_exit"] != 0
    assert "initialization error" in stderr or "re-initialize" in stderr, stderr[-3000:]
