"""The devel stage's torch check is bounded in a real build: with a limit of a fraction of a second
(the ``TORCH_CHECK_TIMEOUT`` build argument every rendered Dockerfile declares), `import torch`
runs past it, the step fails with the line naming the step and the platform, and imagegen's
reading of the build log makes that line the failure's message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from imagegen.building.staging import staged_context
from imagegen.engine import detect_engine
from imagegen.engine.build_log import describe_failure, op_sources
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import TORCH_CHECK_TIMEOUT_ARG, render
from tests.integration.conftest import CA_CERT, REPO, WHEELHOUSE

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


def test_a_torch_check_past_its_limit_fails_naming_the_step_and_the_platform(
    docker_ready: None, tmp_path: Path
) -> None:
    engine = detect_engine()
    if engine.kind == "classic" or engine.client is None:
        pytest.skip("needs a docker CLI with BuildKit (the build log's step lines)")
    spec = build_spec(
        SpecInput(
            cpu=True,
            ops="cpu_adam",
            standins=True,
            wheelhouse=str(WHEELHOUSE),
            ca_cert=str(CA_CERT),
            stable_headers="own",  # the devel stage alone: no op is compiled
        ),
    )
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render(spec))
    with staged_context(spec, REPO) as context:
        argv = [engine.client, "build", "--progress=plain", "--target", "devel", "-f", str(dockerfile)]
        argv += ["--build-arg", f"{TORCH_CHECK_TIMEOUT_ARG}=0.2", str(context)]
        done = subprocess.run(
            argv,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
            capture_output=True,
            text=True,
            timeout=1100,
            check=False,
        )
    lines = (done.stdout + done.stderr).splitlines()
    said = "the devel stage's torch check (import torch) gave no answer within 0.2 s on linux/amd64"
    assert done.returncode != 0, "\n".join(lines[-30:])
    assert any(said in line for line in lines), "\n".join(lines[-30:])
    failure = describe_failure(lines, engine.kind, op_sources(), spec.tag)
    assert failure.message.startswith(f"building {spec.tag} failed: {said}")
    assert "--build-arg TORCH_CHECK_TIMEOUT=SECONDS" in failure.message
