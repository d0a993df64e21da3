"""Cross builds: op_builder's cross target (from DS_TARGET_PLATFORM), its plan and module names,
the ELF machine and emulator checks of verification, and the Dockerfile of a cross build.

The compile itself (aarch64-linux-gnu-g++ against torch's aarch64 wheel) is proven by the
integration test that builds and verifies the arm64 image (tests/integration/test_cross_image.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagegen.errors import BadInputError as ImagegenBadInput
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import context, render
from op_builder import binary
from op_builder.context import resolve_context
from op_builder.cross import CrossTarget, normalize_platform, read_torch_build, resolve_cross
from op_builder.emulation import emulator
from op_builder.errors import BadInputError
from op_builder.plan import make_plan
from op_builder.toolchain import TorchBuild
from tests.unit.fakes import host

VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.10.0+cpu'
debug = False
cuda: Optional[str] = None
git_version = '449b1768410104d3ed79d3bcfe4ba1d65c7f22c0'
hip: Optional[str] = None
"""


def target_site(tmp_path: Path, version_py: str = VERSION_PY) -> Path:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(version_py)
    return tmp_path


def cross_env(site: Path, **more: str) -> dict[str, str]:
    return {"DS_TARGET_PLATFORM": "linux/arm64", "DS_TARGET_SITE_PACKAGES": str(site), **more}


# ---- op_builder: the cross target


def test_no_cross_target_unless_another_platform_is_named(tmp_path: Path) -> None:
    assert resolve_cross({}, native="linux/amd64") is None
    # The build machine's own platform is a native build, whatever the site says.
    assert resolve_cross(cross_env(tmp_path), native="linux/arm64") is None


def test_cross_target_reads_the_target_torch_without_importing_it(tmp_path: Path) -> None:
    site = target_site(tmp_path)
    cross = resolve_cross(cross_env(site), native="linux/amd64")
    assert cross is not None
    assert cross.torch == TorchBuild("2.10.0+cpu", None, None)
    assert (cross.machine, cross.triplet) == ("aarch64", "aarch64-linux-gnu")
    assert (cross.cxx, cross.cc) == ("aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc")
    assert cross.compiler_environment()["_PYTHON_HOST_PLATFORM"] == "linux-aarch64"
    # CXX and CC name another compiler (a cross compiler of another vendor, a ccache wrapper).
    named = resolve_cross(
        cross_env(site, CXX="clang++ --target=aarch64-linux-gnu", CC="clang"), "linux/amd64"
    )
    assert named is not None and (named.cxx, named.cc) == ("clang++ --target=aarch64-linux-gnu", "clang")


def test_a_cuda_target_torch_is_read_with_its_cuda(tmp_path: Path) -> None:
    text = VERSION_PY.replace("'2.10.0+cpu'", "'2.11.0+cu130'").replace(
        "cuda: Optional[str] = None", "cuda = '13.0'"
    )
    assert read_torch_build(target_site(tmp_path, text)) == TorchBuild("2.11.0+cu130", "13.0", None)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DS_TARGET_PLATFORM": "linux/riscv64"}, "not a platform ops are built for"),
        ({"DS_TARGET_PLATFORM": "arm64"}, "DS_TARGET_SITE_PACKAGES is unset"),
    ],
)
def test_bad_cross_settings_are_bad_input(env: dict[str, str], words: str) -> None:
    with pytest.raises(BadInputError, match=words):
        resolve_cross(env, native="linux/amd64")


def test_a_site_without_torch_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="holds no torch") as caught:
        resolve_cross(cross_env(tmp_path), native="linux/amd64")
    assert caught.value.hint is not None and "linux/arm64" in caught.value.hint


def test_platform_spellings() -> None:
    assert [normalize_platform(p) for p in ("aarch64", "linux/arm64/v8", "AMD64")] == [
        "linux/arm64",
        "linux/arm64",
        "linux/amd64",
    ]


def test_module_suffix_and_paths_are_the_targets(tmp_path: Path) -> None:
    cross = CrossTarget("linux/arm64", "linux/amd64", tmp_path, TorchBuild("2.10.0", None, None), "c++", "cc")
    assert cross.ext_suffix(".cpython-311-x86_64-linux-gnu.so") == ".cpython-311-aarch64-linux-gnu.so"
    assert cross.ext_suffix(".abi3.so") == ".abi3.so"
    native = "/opt/build-venv/lib/python3.11/site-packages/torch"
    assert cross.rebase(f"{native}/include/torch/csrc/api/include", native) == str(
        tmp_path / "torch" / "include" / "torch" / "csrc" / "api" / "include"
    )
    assert cross.rebase(f"{native}/lib", native) == str(tmp_path / "torch" / "lib")
    # Only paths inside torch move: the op's own include dirs, and a sibling named like torch, stay.
    assert cross.rebase("/src/kernels/includes", native) == "/src/kernels/includes"
    assert cross.rebase(native + "vision/include", native) == native + "vision/include"


def test_the_plan_of_a_cross_build_uses_the_target_torch_and_refuses_march_native(tmp_path: Path) -> None:
    cross = resolve_cross(cross_env(target_site(tmp_path)), native="linux/amd64")
    toolchain = host()
    toolchain = type(toolchain)(**{**toolchain.__dict__, "torch": cross.torch, "cross": cross})  # type: ignore[union-attr]
    plan = make_plan({"DS_BUILD_CPU_ADAM": "1", "DS_ACCELERATOR": "cpu"}, toolchain)
    assert plan.ok and [op.name for op in plan.ops] == ["cpu_adam"]
    assert "-march=native" not in plan.ops[0].flags.cxx
    with pytest.raises(BadInputError, match="cross build"):
        resolve_context({"DS_CPU_NATIVE": "1"}, toolchain)


# ---- op_builder verify: the module's machine, and what an emulator cannot check

X86_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de\n"
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"


def test_emulation_is_told_by_a_cpuinfo_of_another_isa() -> None:
    assert emulator("aarch64", X86_CPUINFO) == "qemu-user"
    assert emulator("x86_64", ARM_CPUINFO) == "qemu-user"
    assert emulator("aarch64", ARM_CPUINFO) is None
    assert emulator("x86_64", X86_CPUINFO) is None


def _elf(machine: int) -> bytes:
    # e_ident (64-bit, little-endian, version 1), e_type ET_DYN, e_machine
    return b"\x7fELF\x02\x01\x01" + bytes(9) + (3).to_bytes(2, "little") + machine.to_bytes(2, "little")


@pytest.mark.parametrize(("number", "name"), [(62, "x86_64"), (183, "aarch64"), (243, "EM_243")])
def test_elf_machine(tmp_path: Path, number: int, name: str) -> None:
    path = tmp_path / "op.so"
    path.write_bytes(_elf(number) + bytes(40))
    assert binary.elf_machine(path) == name


def test_elf_machine_of_something_else_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "op.so"
    path.write_text("#!/bin/sh\n")
    with pytest.raises(BadInputError, match="not an ELF file"):
        binary.elf_machine(path)


# ---- imagegen: the Dockerfile of a cross build


def spec(**changes: Any) -> Any:
    fields: dict[str, Any] = {"cpu": True, "ops": "cpu_adam,async_io", **changes}
    return build_spec(SpecInput(**fields))


def test_an_amd64_image_takes_no_cross_path() -> None:
    amd64 = spec()
    assert not amd64.cross
    text = render(amd64)
    assert "BUILDPLATFORM" not in text and "DS_TARGET_PLATFORM" not in text and "uv pip" not in text


def test_an_arm64_image_is_cross_compiled_on_an_amd64_builder() -> None:
    arm64 = spec(platform="linux/arm64")
    assert arm64.cross and arm64.build_platform == catalog.AMD64
    text = render(arm64)
    assert "FROM --platform=$BUILDPLATFORM ${BASE_DEVEL} AS devel" in text
    assert "dpkg --add-architecture arm64" in text
    assert "libpython3.11-dev:arm64 libaio-dev:arm64" in text
    assert "g++-aarch64-linux-gnu" in text
    assert (
        "DS_TARGET_PLATFORM=linux/arm64 DS_TARGET_SITE_PACKAGES=/opt/venv/lib/python3.11/site-packages"
        in text
    )
    assert "--python-platform aarch64-manylinux_2_28" in text
    # The build torch is the build platform's CPU build; the image's is the target's.
    assert '"torch==2.13.0+cpu"' in text and '"torch==2.10.0"' in text
    # The ops are checked once, in the runtime stage (the build stage cannot run them).
    build_stage, runtime_stage = text.split("AS runtime")
    assert "op_builder verify" not in build_stage
    assert 'main(["verify", "cpu_adam", "async_io"])' in runtime_stage
    assert "aarch64-linux-gnu-strip --strip-unneeded" in text


def test_the_same_platform_as_the_builder_builds_every_stage_for_it() -> None:
    emulated = spec(platform="linux/arm64", build_platform="linux/arm64")
    assert not emulated.cross
    assert "BUILDPLATFORM" not in render(emulated)
    # The classic builder has no $BUILDPLATFORM: every stage runs on the target, as before.
    assert not spec(platform="linux/arm64", buildkit=False).cross


def test_a_cross_builds_stand_in_devel_base_is_the_build_platforms() -> None:
    cross = spec(platform="linux/arm64", standins=True)
    assert cross.base_devel == catalog.standin_bases("cpu", catalog.AMD64)[0]
    assert cross.base_runtime == catalog.standin_bases("cpu", catalog.ARM64)[1]


def test_a_bad_build_platform_names_its_option() -> None:
    with pytest.raises(ImagegenBadInput, match="--build-platform 'linux/s390x'"):
        spec(platform="linux/arm64", build_platform="linux/s390x")


def test_the_build_wheelhouse_is_staged_beside_the_images(tmp_path: Path) -> None:
    target, build = tmp_path / "arm64", tmp_path / "amd64"
    target.mkdir()
    build.mkdir()
    cross = spec(platform="linux/arm64", wheelhouse=str(target), build_wheelhouse=str(build))
    assert cross.wheelhouses == (target, build)
    values = context(cross)
    assert values["wheelhouse"] is True and values["build_torch_source"] == "--find-links /wheelhouse "
    # Without any wheelhouse the build torch comes from the catalog's CPU index.
    assert context(spec(platform="linux/arm64"))["build_torch_source"].startswith("--index-url ")


# ---- async_io under an emulator without Linux AIO


class _RefusedHandle:
    """What the compiled handle raises where io_setup answers ENOSYS (as qemu-user's does)."""

    def __init__(self, **kwargs: object) -> None:
        raise RuntimeError("async_io: io_setup(4) failed: Function not implemented (raise fs.aio-max-nr ...)")


def test_async_io_is_not_checkable_under_emulation_and_fails_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernels.aio import selftest
    from op_builder.selftest.harness import NotCheckableHere

    monkeypatch.setattr(selftest, "AsyncIO", _RefusedHandle)
    monkeypatch.setattr(selftest, "emulator", lambda: "qemu-user")
    with pytest.raises(NotCheckableHere, match="not checkable under emulation: qemu-user has no Linux AIO"):
        selftest._handle()
    # On a real kernel the same refusal is the op's failure, as it always was.
    monkeypatch.setattr(selftest, "emulator", lambda: None)
    with pytest.raises(RuntimeError, match="Function not implemented"):
        selftest._handle()


def test_imagegen_build_checks_a_cross_image_once_in_its_sealed_verification() -> None:
    from imagegen.runs.pipeline import _build_args

    arm64 = spec(platform="linux/arm64")
    assert _build_args(arm64, verify=True) == {"CHECK_OPS": "0"}
    # Unverified (--no-verify), the build's own check is the only one: it runs.
    assert _build_args(arm64, verify=False) == {}
    assert _build_args(spec(), verify=True) == {}
    # A plain `docker build` of the Dockerfile checks the ops in its runtime stage.
    assert "ARG CHECK_OPS=1" in render(arm64) and "CHECK_OPS" not in render(spec())


def test_a_cross_cuda_build_links_the_targets_cuda_runtime(tmp_path: Path) -> None:
    from op_builder.cross import linkable, target_cuda_library_dirs

    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(b"")
    (tmp_path / "nvidia" / "cudnn" / "lib").mkdir(parents=True)  # no cudart: not a runtime folder
    folders = target_cuda_library_dirs(tmp_path)
    assert folders == [str(lib)]
    # The wheels ship only the versioned file, which -lcudart would not find.
    assert linkable("cudart", folders) == ":libcudart.so.13"
    (lib / "libc10_cuda.so").write_bytes(b"")
    assert linkable("c10_cuda", folders) == "c10_cuda"
    assert linkable("torch_cuda", folders) == "torch_cuda"  # elsewhere: the linker's search decides


def test_a_base_whose_apt_serves_no_target_packages_fails_saying_so(tmp_path: Path) -> None:
    import os
    import subprocess

    text = render(spec(platform="linux/arm64", cuda="13.0", cpu=False, ops="fused_adam"))
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RUN dpkg --add-architecture arm64"))
    script = "\n".join(lines[start : start + 4]).removeprefix("RUN ").rstrip(" \\")
    for tool, body in (
        ("dpkg", "exit 0"),
        ("apt-get", 'echo "E: Unable to locate package $5" >&2; exit 100'),
    ):
        fake = tmp_path / tool
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert (
        "imagegen: error: a cross build for linux/arm64 installs the target's Python headers" in done.stderr
    )
    assert "--build-platform linux/arm64" in done.stderr
    (tmp_path / "apt-get").write_text("#!/bin/sh\nexit 0\n")
    fine = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert fine.returncode == 0 and fine.stderr == ""
