"""A real CPU image of cpu_adam + cpu_lion: built, verified, inspected, run, broken, pushed, interrupted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from imagegen.engine.sealed import sealed_container_options
from tests._processes import processes_mentioning
from tests.integration.conftest import (
    BROKEN_OP,
    CA_CERT,
    CPU_OPS,
    CPU_TAG,
    MISSING_HEADER,
    REPO,
    STANDIN_DEVEL,
    Cli,
    build_args,
    imagegen,
    op_source,
    run_in,
)

# The first test to use the session image pays for building it (minutes on 2 cores, cold).
pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

# How the verifier runs, reused for running real work in the image.
SEALED = sealed_container_options()


def test_build_summary_says_verified(cpu_image: dict[str, Any]) -> None:
    assert cpu_image["ok"] is True
    assert cpu_image["tag"] == CPU_TAG
    assert cpu_image["ops"] == list(CPU_OPS)
    verify = cpu_image["verify"]
    assert verify["ok"] is True
    assert {op["name"]: op["source"] for op in verify["ops"]} == dict.fromkeys(CPU_OPS, "aot")
    assert cpu_image["size_bytes"] > 0


def test_verify_command_on_the_image(cpu_image: dict[str, Any]) -> None:
    result = imagegen("verify", CPU_TAG, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    data = result.json()
    assert data["ok"] is True and data["torch"].startswith("2.13.0")
    assert [op["name"] for op in data["ops"]] == list(CPU_OPS)  # from the io.imagegen.ops label
    assert all(op["source"] == "aot" for op in data["ops"])


def test_verify_fails_for_an_op_the_image_lacks(cpu_image: dict[str, Any]) -> None:
    result = imagegen("verify", CPU_TAG, "--ops", "cpu_adam,cpu_adagrad", "--json")
    assert result.returncode == 1
    ops = {op["name"]: op for op in result.json()["ops"]}
    assert ops["cpu_adam"]["ok"] is True
    assert ops["cpu_adagrad"]["ok"] is False and ops["cpu_adagrad"]["source"] != "aot"


def test_labels(cpu_image: dict[str, Any], docker_client: Any) -> None:
    labels = docker_client.api.inspect_image(CPU_TAG)["Config"]["Labels"]
    assert labels["io.imagegen.ops"] == ",".join(CPU_OPS)
    assert labels["io.imagegen.target"] == "cpu"
    assert labels["io.imagegen.torch"].startswith("2.13.0")
    assert labels["io.imagegen.python"] == "3.11"
    assert labels["io.imagegen.cuda"] == "" and labels["io.imagegen.rocm"] == ""
    assert "io.imagegen.archs" in labels
    for key in ("title", "version", "licenses", "base.name"):
        assert labels[f"org.opencontainers.image.{key}"], key
    assert labels["org.opencontainers.image.base.name"] == "imagegen-standin/python:3.11-runtime"


def test_runs_as_non_root_with_jit_disabled(cpu_image: dict[str, Any], docker_client: Any) -> None:
    config = docker_client.api.inspect_image(CPU_TAG)["Config"]
    assert config["User"] and config["User"].split(":")[0] not in ("root", "0")
    assert "DS_DISABLE_JIT=1" in config["Env"]
    code, out = run_in(docker_client, CPU_TAG, ["sh", "-c", 'id -u; echo "jit=$DS_DISABLE_JIT"'])
    assert code == 0
    uid, jit = out.split()
    assert int(uid) != 0 and jit == "jit=1"


def test_preflight_runs_in_the_image(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """A job's first step: every installed op can run here (CPU ops, no GPU), exit 0."""
    code, out = run_in(
        docker_client, CPU_TAG, ["python", "-m", "op_builder", "preflight", "--json"], network_disabled=True
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["ok"] is True and data["devices"] == []
    assert sorted(op["name"] for op in data["ops"]) == sorted(cpu_image["ops"])
    assert all(op["ok"] for op in data["ops"])


def test_runtime_environment_has_no_build_settings(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """DEBIAN_FRONTEND is for apt while building; a job's environment must not inherit it."""
    env = docker_client.api.inspect_image(CPU_TAG)["Config"]["Env"]
    assert not [e for e in env if e.startswith("DEBIAN_FRONTEND=")], env
    code, out = run_in(docker_client, CPU_TAG, ["sh", "-c", 'echo "frontend=${DEBIAN_FRONTEND-unset}"'])
    assert code == 0 and out.strip() == "frontend=unset", out


def test_runtime_venv_has_numpy(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """NumPy comes with torch (tests/integration/test_quiet_start.py runs it with torch)."""
    probe = "import numpy; print(numpy.__file__)"
    code, out = run_in(docker_client, CPU_TAG, ["python", "-c", probe], **SEALED)
    assert code == 0, out
    assert out.strip().startswith("/opt/venv/"), out


def test_verify_checks_each_named_op_once_in_order(cpu_image: dict[str, Any]) -> None:
    result = imagegen("verify", CPU_TAG, "--ops", "cpu_lion,cpu_adam,cpu_lion", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [op["name"] for op in result.json()["ops"]] == ["cpu_lion", "cpu_adam"]


def test_runtime_has_no_compiler(cpu_image: dict[str, Any], docker_client: Any) -> None:
    compilers = "c++ g++ gcc cc clang nvcc ccache"
    _, out = run_in(docker_client, CPU_TAG, ["sh", "-c", f"which {compilers}; exit 0"])
    assert out.strip() == "", f"compilers found in the runtime image: {out}"
    # The same probe finds them in the devel base, so it can fail.
    code, out = run_in(docker_client, STANDIN_DEVEL, ["sh", "-c", "which g++"])
    assert code == 0 and out.strip()


def test_runtime_venv_has_pip_but_no_build_tools(cpu_image: dict[str, Any], docker_client: Any) -> None:
    names = "pip torch torchgen packaging setuptools wheel ninja"
    probe = f"import importlib.util as u; print(*(n for n in {names.split()!r} if u.find_spec(n)))"
    code, out = run_in(docker_client, CPU_TAG, ["python", "-c", probe])
    assert code == 0, out
    # torchgen is torch's own (custom ops and AOT autograd import it); pip serves derived images.
    assert out.split() == ["pip", "torch", "torchgen", "packaging"]


# `python -v` names the file each module's code came from: its .pyc, or its source when
# Python had to compile it (and, read-only, could not keep the result).
_CODE_FROM = re.compile(r"^# code object from '?(/opt/venv/\S+?)'?$", re.M)
_STARTUP = f"python -v -m op_builder verify {' '.join(CPU_OPS)}; python -v -c 'import kernels.optim.cpu'"
_COUNT_PYC = "find /opt/venv -name '*.pyc' | wc -l"


def test_default_image_keeps_bytecode_for_startup_only(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """Every venv module a start imports comes from a valid .pyc, and only those modules have one."""
    code, out = run_in(docker_client, CPU_TAG, ["sh", "-c", _STARTUP + " 2>&1"], **SEALED)
    assert code == 0, out[-3000:]
    loaded = _CODE_FROM.findall(out)
    assert len(loaded) > 300, out[-3000:]  # torch alone brings hundreds
    compiled = [path for path in loaded if not path.endswith(".pyc")]
    assert compiled == [], f"compiled at start, no valid bytecode: {compiled[:5]}"
    assert "kernels/optim/__pycache__/cpu.cpython" in out  # the fronts are part of a start
    code, pyc_files = run_in(docker_client, CPU_TAG, ["sh", "-c", _COUNT_PYC])
    assert code == 0
    # pip compiled every module of the venv (several thousand); a start needs a fraction.
    assert len(set(loaded)) <= int(pyc_files) < 2 * len(set(loaded)), (pyc_files, len(set(loaded)))


def test_no_bytecode_image_is_smaller_and_verifies(cpu_image: dict[str, Any], docker_client: Any) -> None:
    """Same spec with --bytecode none: only the pruning step and the runtime layer are new work."""
    tag = CPU_TAG + "-nobytecode"
    result = imagegen(*build_args(tag), "--bytecode", "none")
    try:
        assert result.returncode == 0, result.stderr[-5000:]
        summary = result.json()
        assert summary["verify"]["ok"] is True  # loaded in a read-only container, from aot
        assert summary["size_bytes"] < cpu_image["size_bytes"] - 5 * 1024 * 1024
        code, out = run_in(docker_client, tag, ["sh", "-c", _COUNT_PYC])
        assert code == 0 and int(out) == 0, out
        labels = docker_client.api.inspect_image(tag)["Config"]["Labels"]
        assert labels["io.imagegen.bytecode"] == "none"
    finally:
        docker_client.images.remove(tag, force=True)


def _certs(pem: str) -> set[str]:
    return {
        "".join(m.split())
        for m in re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", pem, re.S)
    }


def test_build_ca_certificate_is_not_in_the_runtime(cpu_image: dict[str, Any], docker_client: Any) -> None:
    # The certificates --ca-cert added beyond Debian's own bundle (the proxy's CA here).
    _, debian_bundle = run_in(docker_client, STANDIN_DEVEL, ["cat", "/etc/ssl/certs/ca-certificates.crt"])
    extra = _certs(CA_CERT.read_text()) - _certs(debian_bundle)
    if not extra:
        pytest.skip(f"{CA_CERT} holds no certificate beyond Debian's bundle: nothing to look for")
    _, out = run_in(
        docker_client,
        CPU_TAG,
        ["sh", "-c", "cat /etc/ssl/certs/*.crt /etc/ssl/certs/*.pem 2>/dev/null; exit 0"],
    )
    assert not (extra & _certs(out)), "the build's extra CA certificate reached the runtime image"
    _, out = run_in(docker_client, CPU_TAG, ["sh", "-c", "ls /usr/local/share/ca-certificates/"])
    assert "imagegen" not in out


CPU_ADAM_STEP = """
import json, torch
from kernels.optim import CPUAdam, CPULion
torch.manual_seed(0)
start, grads = torch.randn(4099), [torch.randn(4099) for _ in range(3)]
mine, ref = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
opt = CPUAdam([mine], lr=1e-2, weight_decay=0.01, use_kernel=True)
ref_opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.01)
for g in grads:
    mine.grad, ref.grad = g.clone(), g.clone()
    opt.step(); ref_opt.step()
lion = CPULion([torch.nn.Parameter(start.clone())], lr=1e-3, use_kernel=True)
lion.param_groups[0]["params"][0].grad = grads[0].clone()
lion.step()
print(json.dumps({"adam": opt.backend, "lion": lion.backend,
                  "diff": (mine - ref).abs().max().item(), "moved": (mine - start).abs().max().item()}))
"""


def test_cpu_adam_step_runs_in_the_sealed_image(cpu_image: dict[str, Any], docker_client: Any) -> None:
    code, out = run_in(docker_client, CPU_TAG, ["python", "-c", CPU_ADAM_STEP], **SEALED)
    assert code == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["adam"] == "kernel" and result["lion"] == "kernel"
    assert result["moved"] > 1e-3  # the step did something ...
    assert result["diff"] < 1e-5  # ... and what torch.optim.AdamW does


def test_an_op_that_does_not_compile_fails_the_build_naming_it(broken_build: Cli) -> None:
    # The session's build from sources where cpu_lion's does not compile (conftest's broken_build).
    assert broken_build.returncode == 1
    error = json.loads(broken_build.stdout)["error"]
    assert BROKEN_OP in error["message"]
    assert MISSING_HEADER in error["hint"]  # the compiler's own line, in the hint
    assert error["exit_code"] == 1
    # The checkout itself was not touched.
    assert MISSING_HEADER not in (REPO / op_source(BROKEN_OP)).read_text()


# About 100 s on 2 cores, nearly all of it docker compressing the ~0.9 GB torch layer for the
# registry: too much for every CI run (SLOW=1 runs it). Everything else here reuses the image.
@pytest.mark.slow
def test_push_to_a_registry_and_verify_the_pulled_image(
    cpu_image: dict[str, Any], local_registry: str, docker_client: Any
) -> None:
    remote = f"{local_registry}/imagegen-it/cpu:pushed"
    # Same Dockerfile and context as the session image: every layer comes from the cache.
    result = imagegen(*build_args(remote), "--push")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.json()["pushed"] is True
    built_id = docker_client.api.inspect_image(remote)["Id"]
    docker_client.api.remove_image(remote)
    docker_client.images.pull(remote)
    assert docker_client.api.inspect_image(remote)["Id"] == built_id
    verified = imagegen("verify", remote, "--json")
    assert verified.returncode == 0 and verified.json()["ok"] is True
    docker_client.api.remove_image(remote)


def _verify_containers(docker_client: Any) -> list[Any]:
    # The low-level listing: containers.list() inspects each one, which fails (404) for a
    # container the engine lists while it is still creating it.
    filters = {"label": "io.imagegen.verify", "ancestor": CPU_TAG}
    return list(docker_client.api.containers(all=True, quiet=True, filters=filters))


def _sigint_as_at_a_terminal() -> None:
    """Run in the child before exec: a shell that starts the test run in the background has it
    ignore SIGINT, and an ignored signal survives exec, so Ctrl-C would never reach the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_verify_leaves_no_container(cpu_image: dict[str, Any], docker_client: Any) -> None:
    assert _verify_containers(docker_client) == []
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagegen", "verify", CPU_TAG],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        while not _verify_containers(docker_client):
            assert proc.poll() is None, "verify finished before its container was seen"
            assert time.monotonic() < deadline, "no verify container appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert _verify_containers(docker_client) == []


# Builds the CPU image with the layer cache off through the pipeline, so a RUN step is
# certainly running when the test interrupts it.
UNCACHED_BUILD = """
import os, sys
from imagegen.runs import pipeline
from imagegen.engine import detect_engine
from imagegen.imagespec.spec import SpecInput, build_spec, spec_input
from imagegen.runs.run_choices import RunOptions

engine = detect_engine(prefer_buildkit=sys.argv[1] == "buildkit")
spec = build_spec(
    spec_input(os.environ, ops="cpu_lion", cpu=True, base_devel=sys.argv[2], base_runtime=sys.argv[3],
               wheelhouse=sys.argv[4], ca_cert=sys.argv[5], buildkit=engine.kind != "classic",
               tag="imagegen-it/interrupted:1"),
)
print("engine", engine.kind, flush=True)
pipeline.build(spec, RunOptions(verify=False, no_cache=True), engine=engine)
"""


def _containers_of(docker_client: Any, base: str) -> set[str]:
    """The containers made from ``base`` or an image on it (a classic build's steps are): this
    build's, not those other workers' tests run meanwhile from other images."""
    return {c["Id"] for c in docker_client.api.containers(all=True, filters={"ancestor": base})}


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_ctrl_c_during_a_build_stops_it_and_leaves_no_container(
    builder: str, docker_ready: None, docker_client: Any
) -> None:
    from tests.integration.conftest import STANDIN_RUNTIME, WHEELHOUSE

    before = _containers_of(docker_client, STANDIN_DEVEL)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            UNCACHED_BUILD,
            builder,
            STANDIN_DEVEL,
            STANDIN_RUNTIME,
            str(WHEELHOUSE),
            str(CA_CERT),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "CI": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_as_at_a_terminal,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "RUN apt-get update" in line:  # the devel stage's first RUN has started
                break
        # BuildKit is the CLI's own or the buildx plugin's (where it is installed): either backend.
        kinds = ("buildkit", "buildx") if builder == "buildkit" else ("classic",)
        assert any(f"engine {kind}\n" in lines for kind in kinds), "".join(lines[-20:])
        time.sleep(3)
        if builder == "classic":
            # The classic builder runs the step in a real container: make sure there is one to leak.
            assert _containers_of(docker_client, STANDIN_DEVEL) - before
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, rest[-2000:]
    assert "KeyboardInterrupt" in rest  # interrupted, not failed for another reason
    deadline = time.monotonic() + 20
    while (
        left := _containers_of(docker_client, STANDIN_DEVEL) - before
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"containers left behind: {left}"
    # The docker CLI runs in its own session: it must have been stopped too, not left building.
    assert not processes_mentioning("imagegen-it/interrupted:1")
