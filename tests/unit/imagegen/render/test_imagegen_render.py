"""The rendered Dockerfile: deterministic text, the three stages, and what each stage holds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from imagegen.imagespec.spec import BYTECODE_MODES, ImageSpec, SpecInput, build_spec, spec_input
from imagegen.render.dockerfile import expected_torch_build, render, render_classic, torch_build_check
from op_builder import ALL_OPS

REPO = Path(__file__).resolve().parents[4]


def spec(**flags: object) -> ImageSpec:
    return build_spec(SpecInput(**flags))  # type: ignore[arg-type]


def stages(text: str) -> dict[str, str]:
    """Stage name -> its instructions (from its FROM line up to the next FROM)."""
    found: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        match = re.match(r"^FROM (\S+) AS (\w+)$", line)
        if match:
            name = match[2]
            found[name] = ""
        if name is not None:
            found[name] += line + "\n"
    return found


def labels(text: str) -> dict[str, str]:
    runtime = stages(text)["runtime"]
    return dict(re.findall(r'(\S+)="([^"]*)"', runtime[runtime.index("LABEL ") :].split("\nUSER")[0]))


def test_same_spec_gives_byte_identical_text() -> None:
    one = render(spec(cuda="12.8", ops="all", arch="8.0;9.0+PTX"))
    two = render(spec(cuda="12.8", ops="all", arch="9.0+PTX;8.0"))  # order of input does not matter
    assert one == two
    assert render(spec(cpu=True, ops="cpu_lion,cpu_adam")) == render(spec(cpu=True, ops="cpu_adam,cpu_lion"))


def test_host_paths_never_appear(tmp_path: Path) -> None:
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    text = render(spec(cpu=True, ops="all", ca_cert=str(ca), wheelhouse=str(tmp_path)))
    assert str(tmp_path) not in text
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert render(spec(cpu=True, ops="all", ca_cert=str(ca), wheelhouse=str(other))) == text


def test_three_stages_in_order_with_runtime_last() -> None:
    text = render(spec(cuda="12.1", ops="transformer"))
    assert list(stages(text)) == ["devel", "build", "runtime"]
    # The bases are build arguments declared before the first FROM, defaulting to the spec's.
    assert text.index("ARG BASE_DEVEL=nvidia/cuda:12.1.1-devel-ubuntu22.04\n") < text.index("\nFROM ")
    assert text.index("ARG BASE_RUNTIME=nvidia/cuda:12.1.1-base-ubuntu22.04\n") < text.index("\nFROM ")
    assert "FROM ${BASE_DEVEL} AS devel" in text
    assert "FROM devel AS build" in text
    assert "FROM ${BASE_RUNTIME} AS runtime" in text
    assert not text.startswith("# syntax")


def test_build_stage_sets_only_the_requested_build_variables() -> None:
    build = stages(render(spec(cpu=True, ops="cpu_adam,cpu_lion")))["build"]
    assert re.findall(r"DS_BUILD_\w+=\d", build) == [
        "DS_BUILD_OPS=0",
        "DS_BUILD_CPU_ADAM=1",
        "DS_BUILD_CPU_LION=1",
    ]
    assert "DS_ACCELERATOR=cpu" in build
    assert "TORCH_CUDA_ARCH_LIST" not in build
    # The plan is printed by setup.py's own pass (op_builder's lines are what the build shows).
    assert 'grep --line-buffered -F "op_builder: "' in build
    assert "pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels ." in build
    assert "python -m op_builder verify cpu_adam cpu_lion" in build
    # only the wheel's inputs are copied, so CLI and doc edits leave the compile cached
    copies = re.findall(r"^COPY (.*)$", build, flags=re.M)
    assert copies == [
        "setup.py pyproject.toml README.md ./",
        "op_builder/ op_builder/",
        "kernels/ kernels/",
        # torch's headers the stable ops compile against (--stable-headers newest, staged)
        "_imagegen/torch-headers/ /opt/torch-headers/include/",
        "imagegen/render/split_layers.py /tmp/imagegen-split-layers.py",  # after the ops are built
    ]


def test_gpu_targets_pass_their_arch_list_and_label_each_ops_own_list() -> None:
    text = render(spec(cuda="12.8", ops="fused_adam,fp_quantizer", arch="7.5;9.0+PTX"))
    assert 'TORCH_CUDA_ARCH_LIST="7.5;9.0+PTX"' in stages(text)["build"]
    found = labels(text)
    assert found["io.imagegen.archs"] == "7.5;9.0+PTX"
    assert found["io.imagegen.archs.fused_adam"] == "7.5;9.0+PTX"
    assert found["io.imagegen.archs.fp_quantizer"] == "9.0+PTX"  # the op's own limit (>= 8.0)
    rocm = render(spec(rocm="6.4", ops="quantizer", arch="gfx942;gfx90a"))
    assert 'PYTORCH_ROCM_ARCH="gfx90a;gfx942"' in rocm and "DS_ACCELERATOR=rocm" in rocm


def test_labels() -> None:
    found = labels(render(spec(cuda="12.4", ops="quantizer,cpu_adam")))
    assert found["io.imagegen.ops"] == "cpu_adam,quantizer"
    assert found["io.imagegen.cuda"] == "12.4" and found["io.imagegen.rocm"] == ""
    assert found["io.imagegen.torch"] == "2.6.0+cu124"
    assert found["io.imagegen.python"] == "3.10"
    assert found["io.imagegen.target"] == "cuda12.4"
    # Names the base the build used: the BASE_RUNTIME argument, whose default is the spec's.
    text = render(spec(cuda="12.4", ops="quantizer,cpu_adam"))
    assert found["org.opencontainers.image.base.name"] == "${BASE_RUNTIME}"
    assert "ARG BASE_RUNTIME=nvidia/cuda:12.4.1-base-ubuntu22.04\n" in text
    assert "ARG BASE_RUNTIME\n" in stages(text)["runtime"]
    assert {"org.opencontainers.image.title", "org.opencontainers.image.version"} <= set(found)
    rocm = labels(render(spec(rocm="6.2", ops="all")))
    assert rocm["io.imagegen.rocm"] == "6.2" and rocm["io.imagegen.cuda"] == ""


def test_runtime_is_non_root_without_jit_and_without_compilers() -> None:
    runtime = stages(render(spec(cuda="13.0", ops="all")))["runtime"]
    assert "DS_DISABLE_JIT=1" in runtime
    assert "PATH=/opt/venv/bin:$PATH" in runtime
    users = re.findall(r"^USER (.*)$", runtime, flags=re.M)
    assert users == ["10001:10001"]
    installed = re.search(r"apt-get install -y --no-install-recommends (.*?) \\", runtime)
    assert installed is not None
    for compiler in ("g++", "gcc", "make", "ccache", "build-essential", "-dev"):
        assert compiler not in installed[1]
    # The venv by how often its parts change: the dependencies, the stable op modules (the same
    # for every torch of the target), then ours on top.
    copies = re.findall(r"^COPY --from=build (.*)$", runtime, flags=re.M)
    assert copies == ["/layers/deps/ /", "/layers/modules/ /", "/layers/ours/ /"]


@pytest.mark.parametrize(
    ("ops", "distro", "expected"),
    [
        ("cpu_adam,cpu_lion", "bookworm", "libgomp1"),
        ("async_io", "bookworm", "libaio1 libgomp1"),
        ("async_io", "trixie", "libaio1t64 libgomp1"),
    ],
)
def test_runtime_installs_only_the_selected_ops_packages(ops: str, distro: str, expected: str) -> None:
    runtime = stages(render(spec(cpu=True, ops=ops, distro=distro)))["runtime"]
    assert f"apt-get install -y --no-install-recommends {expected} \\" in runtime


def test_gpu_runtime_gets_python_from_apt_and_only_gpu_op_packages() -> None:
    runtime = stages(render(spec(cuda="12.1", ops="transformer")))["runtime"]
    assert "apt-get install -y --no-install-recommends python3 \\" in runtime
    expected = sorted({p for p in ALL_OPS["transformer"].all_runtime_packages()} | {"python3"})
    assert " ".join(expected) in runtime


def test_ca_cert_is_trusted_while_building_and_absent_from_runtime(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    parts = stages(render(spec(cpu=True, ops="all", ca_cert=str(ca))))
    assert "COPY _imagegen/ca.crt /usr/local/share/ca-certificates/imagegen-extra.crt" in parts["devel"]
    assert "update-ca-certificates" in parts["devel"] and "PIP_CERT=" in parts["devel"]
    assert "ca.crt" not in parts["runtime"] and "PIP_CERT" not in parts["runtime"]
    assert "update-ca-certificates" not in parts["runtime"]
    kept = stages(render(spec(cpu=True, ops="all", ca_cert=str(ca), keep_ca_cert=True)))["runtime"]
    assert "COPY _imagegen/ca.crt /usr/local/share/ca-certificates/imagegen-extra.crt" in kept
    assert "update-ca-certificates" in kept and "ca-certificates" in kept
    plain = render(spec(cpu=True, ops="all"))
    assert "ca.crt" not in plain and "update-ca-certificates" not in plain


def test_wheelhouse_is_bind_mounted_with_buildkit_and_copied_without(tmp_path: Path) -> None:
    buildkit = stages(render(spec(cpu=True, ops="all", wheelhouse=str(tmp_path))))["devel"]
    assert "--mount=type=bind,source=_imagegen/wheelhouse,target=/wheelhouse" in buildkit
    assert "COPY _imagegen/wheelhouse" not in buildkit
    # A wheelhouse may hold a build without the local label (pip download from PyPI).
    assert 'pip install --find-links /wheelhouse "torch==2.13.0"' in buildkit
    assert "--index-url" not in buildkit  # the wheelhouse stands in for the torch index
    classic = stages(render(spec(cpu=True, ops="all", wheelhouse=str(tmp_path), buildkit=False)))["devel"]
    assert "COPY _imagegen/wheelhouse/ /wheelhouse/" in classic and "--mount" not in classic
    offline = render(spec(cpu=True, ops="all", wheelhouse=str(tmp_path), offline=True))
    assert 'pip install --no-index --find-links /wheelhouse "torch==2.13.0"' in offline


def test_torch_comes_from_the_targets_index_by_default() -> None:
    devel = stages(render(spec(cuda="12.6", ops="all")))["devel"]
    assert 'pip install --index-url https://download.pytorch.org/whl/cu126 "torch==2.12.1+cu126"' in devel


def test_torch_from_another_index_is_pinned_by_version_and_its_build_checked() -> None:
    s = spec(cuda="13.0", ops="all", torch="2.15.0", torch_index="https://index.example.invalid/simple")
    assert s.torch_requirement == "torch==2.15.0"  # PyPI and its mirrors: no "+cu130" on CUDA wheels
    devel = stages(render(s))["devel"]
    assert 'pip install --index-url https://index.example.invalid/simple "torch==2.15.0"' in devel
    assert "python -c 'import sys, torch;" in devel
    assert labels(render(s))["io.imagegen.torch"] == "2.15.0"


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        ({"cpu": True}, "CPU"),
        ({"cuda": "12.8"}, "CUDA 12."),
        ({"cuda": "13.0"}, "CUDA 13."),
        ({"rocm": "6.2"}, "ROCm 6.2."),
    ],
)
def test_each_target_names_the_torch_build_it_needs(flags: dict[str, object], want: str) -> None:
    assert expected_torch_build(spec(ops="all", **flags)) == want


def run_check(s: ImageSpec) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", torch_build_check(s)], capture_output=True, text=True, timeout=120
    )


def test_torch_build_check_accepts_the_right_build_and_refuses_another() -> None:
    """Run against the CPU torch installed here: right for --cpu, wrong for CUDA and ROCm."""
    assert run_check(spec(cpu=True, ops="all")).returncode == 0
    for flags in ({"cuda": "13.0"}, {"rocm": "6.2"}):
        wrong = run_check(spec(ops="all", **flags))
        assert wrong.returncode == 1
        message = wrong.stderr.strip().splitlines()[-1]
        assert message.startswith("imagegen: pip installed torch ") and ", a CPU build;" in message
        assert "--torch-index" in message


PRUNE_BYTECODE = "find /opt/venv -depth -type d -name __pycache__ -exec rm -rf {} +"


def test_runtime_venv_drops_build_tools_and_keeps_bytecode_as_asked() -> None:
    build = {
        mode: stages(render(spec(cpu=True, ops="all", bytecode=mode)))["build"] for mode in BYTECODE_MODES
    }
    assert all("pip uninstall --quiet --yes setuptools wheel ninja" in text for text in build.values())
    # all: pip's bytecode stays, and the op check must not add to it.
    assert PRUNE_BYTECODE not in build["all"]
    assert "PYTHONDONTWRITEBYTECODE=1 python -m op_builder verify" in build["all"]
    # none: dropped, and the op check (it imports torch) must not write it back.
    assert PRUNE_BYTECODE in build["none"]
    assert "PYTHONDONTWRITEBYTECODE=1 python -m op_builder verify" in build["none"]
    assert "__all__" not in build["none"]
    # startup: dropped, then written back by the import of the fronts alone: what the op check's
    # self-tests import depends on the ops, and torch's bytecode goes to the layer images share.
    startup = build["startup"]
    check = "DS_DISABLE_JIT=1 PYTHONDONTWRITEBYTECODE=1 python -m op_builder verify"
    assert startup.index(PRUNE_BYTECODE) < startup.index(check) < startup.index("for n in m.__all__")
    for mode in BYTECODE_MODES:
        assert labels(render(spec(cpu=True, ops="all", bytecode=mode)))["io.imagegen.bytecode"] == mode


def test_startup_bytecode_import_line_imports_every_front() -> None:
    """Run the fronts' import line here, in a fresh interpreter, and list what it imported."""
    line = stages(render(spec(cpu=True, ops="all")))["build"].split("python -c '", 1)[1].split("'", 1)[0]
    probe = line + "; import sys; print(*sorted(m for m in sys.modules if m.startswith('kernels.')))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    # Every front module of every family: the Python modules of each op package but its
    # builders and self-test (and its private helpers, which the fronts import when they need).
    fronts = {
        f"kernels.{path.parent.name}.{path.stem}"
        for path in (REPO / "kernels").glob("*/*.py")
        if path.parent.name != "compat"
        and path.stem not in ("__init__", "builders", "selftest")
        and not path.stem.startswith("_")
    }
    assert len(fronts) >= 8 and fronts <= set(done.stdout.split()), fronts - set(done.stdout.split())


def test_classic_variant_has_the_same_stages_and_no_buildkit_syntax() -> None:
    s = spec(cuda="12.8", ops="all")
    classic = render_classic(s)
    assert list(stages(classic)) == ["devel", "build", "runtime"]
    assert "--mount" not in classic and "ccache" not in classic
    assert "PIP_NO_CACHE_DIR=1" in classic
    buildkit = render(s)
    assert "--mount=type=cache,target=/root/.cache/pip" in buildkit
    assert "--mount=type=cache,target=/root/.cache/ccache" in buildkit
    assert stages(classic)["runtime"] == stages(buildkit)["runtime"].replace("BuildKit", "classic")


def test_max_jobs_is_a_build_arg_with_a_computed_default() -> None:
    auto = stages(render(spec(cpu=True, ops="all")))["build"]
    assert "ARG MAX_JOBS=\n" in auto
    assert "/proc/meminfo" in auto and "nproc" in auto and 'MAX_JOBS="$jobs"' in auto
    fixed = stages(render(spec(cpu=True, ops="all", max_jobs=3)))["build"]
    assert "ARG MAX_JOBS=3\n" in fixed


def _torch_install(devel: str) -> list[str]:
    """The arguments the devel stage's `pip install` of torch gets, as bash itself hands them on.

    The rendered line runs in bash with printf in pip's place, so quoting (or its absence) is
    judged by the shell the image uses, not by a reimplementation of its rules.
    """
    line = next(line for line in devel.splitlines() if '"torch==' in line)
    command = line.split("pip install", 1)[1].rstrip(" \\")
    done = subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + command], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    "flags",
    [
        {"cpu": True},
        {"cuda": "13.0"},
        {"rocm": "6.2", "buildkit": False},
        {"cpu": True, "offline": True},
        {"cpu": True, "torch_index": "https://pypi.example.com/simple"},
    ],
)
def test_numpy_comes_with_torch_from_the_same_sources(tmp_path: Path, flags: dict[str, object]) -> None:
    """One pip command installs torch and NumPy: the same index, wheelhouse and --no-index."""
    text = render(spec(ops="all", wheelhouse=str(tmp_path), **flags))
    words = _torch_install(stages(text)["devel"])
    torch_at = next(i for i, w in enumerate(words) if w.startswith("torch=="))
    numpy_at = next(i for i, w in enumerate(words) if w.startswith("numpy"))
    assert numpy_at == torch_at + 1  # the same command, after the same source flags
    assert all(w.startswith("--") or words[i - 1].startswith("--") for i, w in enumerate(words[:torch_at]))
    assert Requirement(words[numpy_at]).name == "numpy"
    # No warning filter of any kind is written into the image.
    assert ".pth" not in text.replace("imagegen-op-sources.pth", "")
    assert "filterwarnings" not in text and "PYTHONWARNINGS" not in text


@pytest.mark.parametrize(
    ("torch", "numpy2"), [("2.0.1", False), ("2.3.1", False), ("2.4.0", True), ("2.13.0", True)]
)
def test_torch_built_against_numpy_1_gets_numpy_1(torch: str, numpy2: bool) -> None:
    """torch up to 2.3 loads NumPy 1.x only: the requirement must not let pip pick 2.x."""
    requirement = Requirement(spec(cpu=True, ops="cpu_adam", torch=torch).numpy_requirement or "")
    assert requirement.specifier.contains("1.26.4")
    assert requirement.specifier.contains("2.1.0") is numpy2


def test_no_numpy_leaves_it_out_honestly_and_names_the_tag() -> None:
    with_numpy = spec(cpu=True, ops="cpu_adam")
    without = spec(cpu=True, ops="cpu_adam", numpy=False)
    text = render(without)
    assert not any(w.startswith("numpy") for w in _torch_install(stages(text)["devel"]))
    assert "filterwarnings" not in text  # torch's warning about the absent NumPy stays: it is true
    assert without.tag == with_numpy.tag + "-nonumpy"
    assert build_spec(spec_input({"IMAGEGEN_NUMPY": "0"}, cpu=True, ops="cpu_adam")).numpy is False


@pytest.mark.parametrize("flags", [{"cpu": True}, {"cuda": "13.0"}, {"rocm": "6.4"}])
def test_debian_frontend_is_a_build_argument_never_the_images_environment(flags: dict[str, object]) -> None:
    """ARG values reach the RUN steps of their stage only; ENV would stay in the runtime image."""
    text = render(spec(ops="all", **flags))
    # devel (build inherits it) and runtime, each for its apt-get
    args = re.findall(r"^ARG DEBIAN_FRONTEND=noninteractive$", text, flags=re.M)
    assert args == ["ARG DEBIAN_FRONTEND=noninteractive"] * 2
    envs = re.findall(r"^ENV (?:.*\\\n)*.*$", text, flags=re.M)
    assert envs and not any("DEBIAN_FRONTEND" in env for env in envs)


@pytest.mark.parametrize(
    "url",
    [
        "https://pypi.example.com/simple",
        "https://pypi.example.com:8443/a;b/simple?x=1&y=$(id)&z=%40",  # credentials: test_url_secrets
        "file:///srv/index",
    ],
)
def test_the_torch_index_is_one_shell_word(url: str) -> None:
    """Whatever characters a valid URL has, the shell hands pip exactly that URL."""
    words = _torch_install(stages(render(spec(cpu=True, ops="cpu_adam", torch_index=url)))["devel"])
    assert words[words.index("--index-url") + 1] == url
