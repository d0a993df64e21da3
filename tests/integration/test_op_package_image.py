"""An image with an op package from outside the repository: examples/acme_ops beside cpu_adam.

Built from the stand-ins by the real CLI (once per session: conftest's ``op_package_image``), then
verified again in a sealed container: both ops
load ahead of time and pass their self-tests (the package's own, against torch), the package's op
is a stable-ABI module where the image's torch has the stable ABI, the labels name the package's op
and the digest of its sources, and the package imports in the runtime as a user's code would
import it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagegen.imagespec.spec import SpecInput, build_spec
from tests.integration.conftest import OP_PACKAGE, OP_PACKAGE_OPS, OP_PACKAGE_TAG, imagegen, run_in

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

PACKAGE = OP_PACKAGE
TAG = OP_PACKAGE_TAG
OPS = OP_PACKAGE_OPS


@pytest.fixture(scope="module")
def package_image(op_package_image: dict[str, Any]) -> dict[str, Any]:
    return op_package_image


def test_the_package_op_is_built_and_verified_like_ours(package_image: dict[str, Any]) -> None:
    assert package_image["ok"] is True
    assert tuple(package_image["ops"]) == ("cpu_adam", "acme_rmsnorm")  # ours first, then the package's
    verified = imagegen("verify", TAG, "--json")
    assert verified.returncode == 0, verified.stderr[-3000:]
    ops = {op["name"]: op for op in verified.json()["ops"]}
    assert set(ops) == set(OPS)
    for name in OPS:
        assert ops[name]["source"] == "aot"
        test = ops[name]["selftest"]
        assert test["ok"] is True and test["device"] == "cpu"
        assert test["max_abs_err"] is not None and test["max_abs_err"] <= test["tolerance"]


# The image's own judgement of its package op: which module it installed, and whether its torch
# (the target's, not this machine's) builds stable-ABI modules.
STABLE_IN_IMAGE = """
import json, pathlib, kernels, torch
from op_builder.cross import native_platform
from op_builder.stable_abi import stable_target
ops = pathlib.Path(kernels.__file__).parent / "_ops"
entry = json.loads((ops / "manifest.json").read_text())["ops"]["acme_rmsnorm"]
print(json.dumps({
    "stable_here": stable_target("2.10", torch.__version__, "cpu", native_platform()),
    "stable_abi": entry["stable_abi"],
    "modules": sorted(p.name for p in ops.glob("acme_rmsnorm*.so")),
}))
"""


def test_the_package_op_is_one_stable_module_where_the_torch_allows(
    package_image: dict[str, Any], docker_client: Any
) -> None:
    """acme_rmsnorm's binding is written against op_abi.h, whose folder (op_builder.SHARED_INCLUDE_DIR)
    the build stage has beside op_builder: with a torch of 2.10 or newer the image holds it as one
    .abi3.so that loads on every torch from 2.10 on."""
    status, output = run_in(docker_client, TAG, ["python", "-c", STABLE_IN_IMAGE])
    assert status == 0, output
    found = json.loads(output.strip().splitlines()[-1])
    assert found["stable_abi"] == found["stable_here"]
    if found["stable_here"] is not None:
        assert found["modules"] == ["acme_rmsnorm.abi3.so"]


def test_the_labels_name_the_package_op_and_its_source_digest(
    package_image: dict[str, Any], docker_client: Any
) -> None:
    labels = docker_client.api.inspect_image(TAG)["Config"]["Labels"]
    assert labels["io.imagegen.external-ops"] == "acme_rmsnorm"
    spec = build_spec(SpecInput(cpu=True, ops=",".join(OPS), op_sources=(str(PACKAGE),)))
    assert labels["io.imagegen.op-packages"] == f"acme_ops={spec.op_packages[0].digest}"
    assert labels["io.imagegen.ops"] == "cpu_adam,acme_rmsnorm"


def test_user_code_in_the_runtime_imports_the_package_front(
    package_image: dict[str, Any], docker_client: Any
) -> None:
    code = (
        "import json, torch, torch.nn.functional as F\n"
        "from acme_ops.rmsnorm import rms_norm\n"
        "x = torch.randn(5, 33); w = torch.randn(33)\n"
        "y = rms_norm(x, w, use_kernel=True)\n"
        "ref = F.rms_norm(x, (33,), w, eps=1e-6)\n"
        "print(json.dumps({'err': float((y - ref).abs().max())}))\n"
    )
    status, output = run_in(docker_client, TAG, ["python", "-c", code])
    assert status == 0, output
    assert json.loads(output.strip().splitlines()[-1])["err"] < 1e-5
    # Sealed: the compiler is gone, and JIT stays disabled, so this ran the AOT module.
    status, output = run_in(docker_client, TAG, ["python", "-c", "import shutil; print(shutil.which('c++'))"])
    assert output.strip() == "None"
