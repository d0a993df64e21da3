"""A stable op built against its target's own headers (torch 2.10's, the oldest a stable build
takes: what a just-in-time build on torch 2.10 uses) has its ops, schemas and kernels, in its
own namespace, and runs right on the torch here.

torch 2.10's STABLE_TORCH_LIBRARY stringizes its namespace argument as it is written, so a
binding that passes the build's namespace as a macro (IMAGEGEN_OP_NAMESPACE) defined its schemas
in a namespace of that very name while its kernels went to the real one: a module whose ops had
no schema, which torch.ops does not offer (op_abi.h passes it through one more macro). The
headers are read out of torch 2.10.0's wheel on this machine's package index (about 10 MB with
range requests, cached under ~/.cache/imagegen/torch-headers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagegen.compat.headers import fetch_headers
from imagegen.compat.pip_config import pip_index_url
from imagegen.errors import IndexUnreachableError

REPO = Path(__file__).resolve().parents[2]
TARGET = "2.10.0"

# Built and stepped in a process of its own (a process loads an op once per name); the reference
# is Lion written out in torch.
STEP = """
import json, torch
from op_builder import get_builder
module = get_builder("cpu_lion").load()
params, grads = [torch.randn(37), torch.randn(5)], [torch.randn(37), torch.randn(5)]
momenta = [torch.randn(37), torch.randn(5)]
expected = []
for p, g, m in zip(params, grads, momenta):
    c = m * 0.9 + g * (1 - 0.9)
    expected.append(p * (1 - 0.01 * 0.1) - torch.sign(c) * 0.01)
module.lion_steps(params, grads, momenta, 0.01, 0.9, 0.99, 0.1)
namespace = getattr(torch.ops, module.op_namespace)
ops = [name for name in ("lion_step", "lion_steps", "simd_level") if hasattr(namespace, name)]
print(json.dumps({"equal": all(torch.equal(p, e) for p, e in zip(params, expected)), "ops": ops}))
"""


@pytest.fixture(scope="module")
def target_headers() -> Path:
    try:
        return fetch_headers(TARGET, pip_index_url())
    except IndexUnreachableError as exc:
        pytest.skip(f"torch {TARGET}'s headers cannot be had here: {exc}")


@pytest.mark.timeout(600)
def test_built_against_the_targets_headers_its_ops_have_schemas(target_headers: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DS_STABLE_HEADERS": str(target_headers),
        "TORCH_EXTENSIONS_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", STEP], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=550
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["equal"]
    assert result["ops"] == ["lion_step", "lion_steps", "simd_level"]
