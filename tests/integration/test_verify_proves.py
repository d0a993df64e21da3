"""Verification refuses images whose kernels compute wrong: a patched module in a derived image,
and a kernel built wrong from source (the build stage's self-test fails the build, naming it)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from imagegen.building.build_inputs import copy_build_inputs
from tests.integration.conftest import CPU_TAG, REPO, build_args, imagegen

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

DERIVED_TAG = "imagegen-it/wrong-kernel:cpu_lion"
# One .pth line, run at every start of the venv's Python: the compiled cpu_lion module's step
# still runs, then adds 1.0 to the first element of the first param: what a miscompiled or
# tampered kernel looks like from the outside. The module loads, so only a self-test can catch
# it. cpu_lion is a stable module, whose ops the loader hands out through StableOps: the line
# wraps the op StableOps returns for the list step the optimizer calls. Default arguments bind
# what the lambdas need: site runs a .pth line inside a function, so its names are no globals.
BREAK_LION = (
    "import op_builder.stable_module as s; "
    "s.StableOps.__getattr__ = lambda self, name, _get=s.StableOps.__getattr__: "
    "(lambda op: (lambda p, *rest: (op(p, *rest), p[0].view(-1)[0].add_(1.0))[0]) "
    "if name == \"lion_steps\" else op)(_get(self, name))"
)


@pytest.fixture(scope="module")
def derived_wrong_image(cpu_image: dict[str, Any], docker_client: Any) -> str:
    user = docker_client.api.inspect_image(CPU_TAG)["Config"]["User"]
    dockerfile = f"""FROM {CPU_TAG}
USER root
RUN site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \\
 && printf '%s\\n' '{BREAK_LION}' >"$site/zz_wrong_lion.pth"
USER {user}
"""
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=DERIVED_TAG, rm=True)
    return DERIVED_TAG


def test_verify_refuses_an_image_whose_kernel_computes_wrong(derived_wrong_image: str) -> None:
    result = imagegen("verify", derived_wrong_image, "--json")
    assert result.returncode == 1, result.stderr[-2000:]
    ops = {op["name"]: op for op in result.json()["ops"]}
    assert ops["cpu_adam"]["ok"] is True and ops["cpu_adam"]["selftest"]["ok"] is True
    lion = ops["cpu_lion"]
    assert lion["source"] == "aot"  # it loads: only the self-test tells it is wrong
    assert lion["ok"] is False and lion["selftest"]["ok"] is False
    assert lion["selftest"]["max_abs_err"] > lion["selftest"]["tolerance"]
    text = imagegen("verify", derived_wrong_image)
    assert text.returncode == 1
    assert "cpu_lion (self-test failed: lion param" in text.stderr and "> tolerance" in text.stderr
    # The untouched image still verifies, self-tests included.
    good = imagegen("verify", CPU_TAG, "--json")
    assert good.returncode == 0
    assert all(op["selftest"]["ok"] and op["selftest"]["isa"] for op in good.json()["ops"])


def test_a_kernel_that_computes_wrong_fails_the_build_naming_it(tmp_path: Path) -> None:
    checkout = copy_build_inputs(REPO, tmp_path / "checkout")
    source = checkout / "kernels" / "optim" / "csrc" / "cpu_lion.cpp"
    text = source.read_text()
    assert "args.lr = static_cast<float>(lr);" in text
    # It compiles and loads; every step moves twice as far as Lion's rule says.
    source.write_text(
        text.replace("args.lr = static_cast<float>(lr);", "args.lr = static_cast<float>(2 * lr);")
    )
    result = imagegen(*build_args("imagegen-it/wrong:cpu_lion", ops=["cpu_lion"]), "--source", str(checkout))
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert "cpu_lion" in error["message"]
    assert "cpu_lion" in error["hint"] and "FAIL" in error["hint"]  # the build stage's verify table
