"""op_builder.binary on real binaries compiled here: CUDA fatbins from the local nvcc, HIP
offload bundles from hipcc. Each build's expected names are written out from the flags it
was compiled with, not computed by op_builder.archs; where a cuobjdump is installed (NVIDIA's
``nvidia-cuda-cuobjdump`` wheel), its listing is checked against the reader too."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from op_builder.binary import Audit, DeviceCode, audit, format_text, read_device_code
from op_builder.errors import BadInputError
from op_builder.manifest import InstalledOp, Manifest
from op_builder.report import OpVerification
from op_builder.verify import audit_module

NVCC = shutil.which("nvcc")
HIPCC = shutil.which("hipcc")
CC = shutil.which("gcc") or shutil.which("cc")
OBJCOPY = shutil.which("objcopy")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no CUDA toolkit (nvcc) on this machine")
needs_hipcc = pytest.mark.skipif(
    HIPCC is None, reason="no hipcc: `scripts/system-deps.sh` installs Debian's ROCm 5.2"
)
needs_cc = pytest.mark.skipif(
    CC is None, reason="no C compiler to build a CPU-only shared object (apt-get install gcc)"
)


def _gencode(arch: str, code: str) -> str:
    return f"-gencode=arch={arch},code={code}"


# name: (translation units, link with nvcc -shared (adds a device-link fatbin) or g++ as torch
# does, -gencode flags, the SASS and PTX the module must hold).
CUDA_BUILDS: dict[str, tuple[int, bool, list[str], tuple[str, ...], tuple[str, ...]]] = {
    "one_arch": (1, False, [_gencode("compute_80", "sm_80")], ("sm_80",), ()),
    "two_archs": (
        1,
        True,
        [_gencode("compute_80", "sm_80"), _gencode("compute_90", "sm_90")],
        ("sm_80", "sm_90"),
        (),
    ),
    "plus_ptx": (  # 8.0;9.0+PTX
        1,
        False,
        [
            _gencode("compute_80", "sm_80"),
            _gencode("compute_90", "sm_90"),
            _gencode("compute_90", "compute_90"),
        ],
        ("sm_80", "sm_90"),
        ("compute_90",),
    ),
    "ptx_only": (1, False, [_gencode("compute_90", "compute_90")], (), ("compute_90",)),
    "arch_specific": (1, False, [_gencode("compute_90a", "sm_90a")], ("sm_90a",), ()),
    "family_plus_ptx": (
        1,
        False,
        [_gencode("compute_100f", "sm_100f"), _gencode("compute_100f", "compute_100f")],
        ("sm_100f",),
        ("compute_100f",),
    ),
    "arch_twice": (  # sm_80 given twice on the command line and built in two translation units
        2,
        False,
        [_gencode("compute_80", "sm_80"), _gencode("compute_80", "sm_80"), _gencode("compute_90", "sm_90")],
        ("sm_80", "sm_90"),
        (),
    ),
}

KERNEL = "__global__ void add_{i}(float* x, int n) {{ int j = threadIdx.x; if (j < n) x[j] += {i}.0f; }}\n"
HIP_KERNEL = "#include <hip/hip_runtime.h>\n" + KERNEL


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def _sources(directory: Path, units: int, suffix: str, template: str) -> list[Path]:
    directory.mkdir(parents=True)
    paths = [directory / f"unit{i}{suffix}" for i in range(units)]
    for i, path in enumerate(paths):
        path.write_text(template.format(i=i + 1))
    return paths


def _build_cuda(root: Path, name: str) -> Path:
    units, nvcc_link, flags, _, _ = CUDA_BUILDS[name]
    assert NVCC is not None
    sources = _sources(root / name, units, ".cu", KERNEL)
    module = root / name / f"{name}.so"
    if nvcc_link:
        _run(NVCC, "-shared", "-Xcompiler", "-fPIC", *flags, *sources, "-o", module, cwd=root)
        return module
    objects = [s.with_suffix(".o") for s in sources]
    for source, obj in zip(sources, objects):
        _run(NVCC, "-c", "-Xcompiler", "-fPIC", *flags, source, "-o", obj, cwd=root)
    _run("g++", "-shared", *objects, "-o", module, cwd=root)
    return module


@pytest.fixture(scope="session")
def cuda_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if NVCC is None:
        pytest.skip("no CUDA toolkit (nvcc) on this machine")
    root = tmp_path_factory.mktemp("cuda_modules")
    with ThreadPoolExecutor(max_workers=2) as pool:  # tiny kernels; the machine has 2 cores
        built = pool.map(lambda name: (name, _build_cuda(root, name)), CUDA_BUILDS)
        return dict(built)


@pytest.fixture(scope="session")
def hip_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if HIPCC is None:
        pytest.skip("no hipcc: `scripts/system-deps.sh` installs Debian's ROCm 5.2")
    root = tmp_path_factory.mktemp("hip_modules")
    env = {"HIP_PLATFORM": "amd"}
    two = _sources(root / "two_targets", 2, ".hip", HIP_KERNEL)
    rdc = _sources(root / "rdc_features", 1, ".hip", HIP_KERNEL)
    bundle = _sources(root / "bundle", 1, ".hip", HIP_KERNEL)
    archs = ["--offload-arch=gfx90a", "--offload-arch=gfx1030"]
    rdc_out = root / "rdc_features.o"
    commands = {
        # Two translation units: two bundles in .hip_fatbin, padded to 4096 bytes.
        "two_targets": [HIPCC, *archs, "-fPIC", "-shared", *two, "-o", root / "two_targets.so"],
        # -fgpu-rdc objects name each target in a section; the xnack feature must stay.
        "rdc_features": [
            HIPCC,
            "--offload-arch=gfx90a:xnack-",
            "-fgpu-rdc",
            "-fPIC",
            "-c",
            *rdc,
            "-o",
            rdc_out,
        ],
        # A bare bundle, as --offload-compress would compress it.
        "bundle": [HIPCC, "--genco", *archs, *bundle, "-o", root / "bundle.co"],
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda command: _run(*command, cwd=root, env=env), commands.values()))
    return {
        "two_targets": root / "two_targets.so",
        "rdc_features": rdc_out,
        "bundle": root / "bundle.co",
    }


@pytest.fixture(scope="session")
def cpu_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CC is None:
        pytest.skip("no C compiler to build a CPU-only shared object (apt-get install gcc)")
    root = tmp_path_factory.mktemp("cpu_module")
    (root / "plain.c").write_text("int answer(void) { return 42; }\n")
    _run(CC, "-shared", "-fPIC", "plain.c", "-o", "plain.so", cwd=root)
    return root / "plain.so"


# ---------------------------------------------------------------- reading


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CUDA_BUILDS))
def test_fatbin_lists_what_the_gencode_flags_asked_for(cuda_modules: dict[str, Path], name: str) -> None:
    *_, sass, ptx = CUDA_BUILDS[name]
    found = read_device_code(cuda_modules[name])
    assert (found.sass, found.ptx, found.gfx, found.other, found.unreadable) == (sass, ptx, (), (), ())


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found is not None:
        return found
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels (nvidia-cuda-cuobjdump)
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump")):
            return str(candidate)
    return None


@needs_nvcc
@pytest.mark.skipif(_cuobjdump() is None, reason="no cuobjdump (pip install nvidia-cuda-cuobjdump)")
@pytest.mark.parametrize("name", sorted(CUDA_BUILDS))
def test_fatbin_agrees_with_cuobjdump(cuda_modules: dict[str, Path], name: str) -> None:
    done = subprocess.run(
        [str(_cuobjdump()), "--list-elf", "--list-ptx", str(cuda_modules[name])],
        capture_output=True,
        text=True,
        timeout=120,
    )  # exit status 255 when one of the two lists is empty: read the listing, not the status
    listed = re.findall(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\w+)\.(?:cubin|ptx)$", done.stdout, re.M)
    assert listed or done.returncode == 0, done.stdout + done.stderr
    elf = {arch for kind, arch in listed if kind == "ELF"}
    ptx = {arch.replace("sm_", "compute_") for kind, arch in listed if kind == "PTX"}
    found = read_device_code(cuda_modules[name])
    # cuobjdump names a cubin by its ELF header, which has no mark for the 'f' variant.
    assert {re.sub(r"f$", "", s) for s in found.sass} == elf
    assert set(found.ptx) == ptx


@needs_hipcc
def test_offload_bundles_list_each_gfx_target(hip_modules: dict[str, Path]) -> None:
    found = read_device_code(hip_modules["two_targets"])
    assert found == DeviceCode(gfx=("gfx90a", "gfx1030"))
    assert read_device_code(hip_modules["rdc_features"]) == DeviceCode(gfx=("gfx90a:xnack-",))


def _compressed_bundle(bundle: bytes, method: int, body: bytes) -> bytes:
    """A CCOB v2 as LLVM's CompressedOffloadBundle writes it (the ids are inside ``body``)."""
    header_size = 4 + 2 + 2 + 4 + 4 + 8
    return b"CCOB" + struct.pack("<HHIIQ", 2, method, header_size + len(body), len(bundle), 0) + body


def _with_section(host: Path, name: str, content: bytes, out: Path) -> Path:
    assert OBJCOPY is not None
    blob = out.with_suffix(".bin")
    blob.write_bytes(content)
    _run(OBJCOPY, "--add-section", f"{name}={blob}", host, out, cwd=out.parent)
    return out


@needs_hipcc
@needs_cc
@pytest.mark.skipif(OBJCOPY is None, reason="no objcopy to place a section in a shared object")
def test_compressed_bundles_are_read_or_reported(
    hip_modules: dict[str, Path], cpu_module: Path, tmp_path: Path
) -> None:
    bundle = hip_modules["bundle"].read_bytes()
    zlib_ccob = _compressed_bundle(bundle, 0, zlib.compress(bundle))
    readable = _with_section(cpu_module, ".hip_fatbin", zlib_ccob, tmp_path / "zlib.so")
    assert read_device_code(readable) == DeviceCode(gfx=("gfx90a", "gfx1030"))

    # zstd needs Python 3.14's compression.zstd; either way this body is not a zstd frame.
    zstd_ccob = _compressed_bundle(bundle, 1, b"not a zstd frame")
    unreadable = read_device_code(_with_section(cpu_module, ".hip_fatbin", zstd_ccob, tmp_path / "zstd.so"))
    assert unreadable.gfx == () and len(unreadable.unreadable) == 1
    assert "compressed offload bundle" in unreadable.unreadable[0]
    result = audit(unreadable, ["gfx90a"])
    assert (result.ok, result.missing) == (False, ("gfx90a",))


@needs_cc
def test_a_cpu_module_holds_no_device_code(cpu_module: Path) -> None:
    found = read_device_code(cpu_module)
    assert found == DeviceCode()
    assert found.to_json() == {"sass": [], "ptx": [], "gfx": [], "other": [], "unreadable": []}
    assert "no device code" in format_text(found)


@needs_nvcc
def test_format_text_names_each_kind(cuda_modules: dict[str, Path]) -> None:
    text = format_text(read_device_code(cuda_modules["plus_ptx"]))
    assert text.splitlines() == ["SASS:  sm_80 sm_90", "PTX:   compute_90", "gfx:   -"]


# ---------------------------------------------------------------- bad input


def _assert_bad_input(path: Path, words: str) -> None:
    with pytest.raises(BadInputError) as raised:
        read_device_code(path)
    assert raised.value.exit_code == 2 and raised.value.hint
    assert words in raised.value.message, raised.value.message


def test_files_that_are_not_64_bit_little_endian_elf_are_bad_input(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("this is not a shared object, but it is long enough to pass\n" * 2)
    _assert_bad_input(tmp_path / "notes.txt", "not an ELF file")
    (tmp_path / "empty.so").write_bytes(b"")
    _assert_bad_input(tmp_path / "empty.so", "not an ELF file")
    (tmp_path / "elf32.so").write_bytes(b"\x7fELF\x01\x01\x01" + bytes(57))
    _assert_bad_input(tmp_path / "elf32.so", "32-bit little-endian")
    _assert_bad_input(tmp_path / "missing.so", "cannot read")


@needs_nvcc
def test_truncated_or_corrupt_modules_are_bad_input(cuda_modules: dict[str, Path], tmp_path: Path) -> None:
    whole = cuda_modules["plus_ptx"].read_bytes()
    (tmp_path / "half.so").write_bytes(whole[: len(whole) // 2])  # the section headers are at the end
    _assert_bad_input(tmp_path / "half.so", "runs past the end")
    (tmp_path / "header.so").write_bytes(whole[:40])
    _assert_bad_input(tmp_path / "header.so", "ELF header at offset 0x0 runs past the end")

    container = whole.find(struct.pack("<I", 0xBA55ED50))
    assert container > 0
    corrupt = bytearray(whole)  # the first entry's payload size (u64 at 8 in its header) made huge
    struct.pack_into("<Q", corrupt, container + 16 + 8, 1 << 40)
    (tmp_path / "corrupt.so").write_bytes(bytes(corrupt))
    _assert_bad_input(tmp_path / "corrupt.so", "runs past its container")


# ---------------------------------------------------------------- audit


@needs_nvcc
def test_audit_passes_when_the_module_holds_exactly_the_plan(cuda_modules: dict[str, Path]) -> None:
    result = audit(read_device_code(cuda_modules["plus_ptx"]), ["8.0", "9.0+PTX"])
    assert result.ok and (result.missing, result.extra) == ((), ())
    assert result.planned == ("compute_90", "sm_80", "sm_90")
    assert audit(read_device_code(cuda_modules["arch_specific"]), ["9.0a"]).ok
    assert audit(read_device_code(cuda_modules["family_plus_ptx"]), ["10.0f+PTX"]).ok
    assert audit(read_device_code(cuda_modules["arch_twice"]), ["8.0", "9.0"]).ok


@needs_nvcc
@pytest.mark.parametrize(
    ("name", "planned", "missing", "extra"),
    [
        ("two_archs", ["8.0"], (), ("sm_90",)),  # an arch leaked in
        ("two_archs", ["8.0", "9.0+PTX"], ("compute_90",), ()),  # PTX dropped
        ("one_arch", ["8.0", "9.0"], ("sm_90",), ()),  # an arch dropped
        ("ptx_only", ["9.0+PTX"], ("sm_90",), ()),  # PTX without its SASS
        ("arch_specific", ["9.0"], ("sm_90",), ("sm_90a",)),  # 9.0a is not 9.0
        ("plus_ptx", ["8.0", "9.0"], (), ("compute_90",)),  # PTX nobody asked for
    ],
)
def test_audit_fails_on_a_missing_or_extra_arch(
    cuda_modules: dict[str, Path],
    name: str,
    planned: list[str],
    missing: tuple[str, ...],
    extra: tuple[str, ...],
) -> None:
    result = audit(read_device_code(cuda_modules[name]), planned)
    assert (result.ok, result.missing, result.extra) == (False, missing, extra)
    assert result.to_json()["ok"] is False


@needs_hipcc
def test_audit_of_gfx_targets(hip_modules: dict[str, Path]) -> None:
    two = read_device_code(hip_modules["two_targets"])
    assert audit(two, ["gfx90a", "gfx1030"]).ok
    assert audit(two, ["gfx90a"]).extra == ("gfx1030",)
    assert audit(two, ["gfx90a", "gfx942", "gfx1030"]).missing == ("gfx942",)
    features = audit(read_device_code(hip_modules["rdc_features"]), ["gfx90a"])
    assert (features.ok, features.missing, features.extra) == (False, ("gfx90a",), ("gfx90a:xnack-",))


def test_audit_json_shape() -> None:
    found = DeviceCode(sass=("sm_80",), ptx=("compute_80",))
    result = audit(found, ["8.0+PTX"])
    assert isinstance(result, Audit) and result.ok
    assert result.to_json() == {
        "sass": ["sm_80"],
        "ptx": ["compute_80"],
        "gfx": [],
        "other": [],
        "unreadable": [],
        "planned": ["compute_80", "sm_80"],
        "missing": [],
        "extra": [],
        "ok": True,
    }
    assert audit(DeviceCode(), []).ok
    assert audit(DeviceCode(), ["8.0"]).missing == ("sm_80",)


def _op_builder(*args: str | Path) -> subprocess.CompletedProcess[str]:
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "op_builder", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )


def test_the_binary_command_prints_the_json_and_refuses_non_elf(
    cuda_modules: dict[str, Path], tmp_path: Path
) -> None:
    done = _op_builder("binary", "--json", cuda_modules["plus_ptx"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == read_device_code(cuda_modules["plus_ptx"]).to_json()
    text = _op_builder("binary", cuda_modules["plus_ptx"])
    assert text.returncode == 0 and "SASS" in text.stdout
    junk = tmp_path / "junk.so"
    junk.write_text("not an ELF file\n")
    refused = _op_builder("binary", junk)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("error: ")


def _manifest(name: str, target: str, archs: tuple[str, ...]) -> Manifest:
    op = InstalledOp(name, f"kernels._ops.{name}", target, archs)
    return Manifest("2.13.0", "13.0", None, "cuda", "3.11", {name: op})


@pytest.mark.parametrize(
    ("module", "planned", "missing", "extra"),
    [
        ("plus_ptx", ("8.0", "9.0+PTX"), (), ()),  # exactly the plan
        ("plus_ptx", ("8.0", "9.0"), (), ("compute_90",)),  # PTX nobody planned
        ("two_archs", ("8.0", "9.0+PTX"), ("compute_90",), ()),  # PTX missing
        ("one_arch", ("8.0", "9.0"), ("sm_90",), ()),  # an arch missing
        ("two_archs", ("8.0",), (), ("sm_90",)),  # an arch nobody planned
    ],
)
def test_verification_audits_a_gpu_module_against_its_manifest(
    cuda_modules: dict[str, Path],
    module: str,
    planned: tuple[str, ...],
    missing: tuple[str, ...],
    extra: tuple[str, ...],
) -> None:
    found = audit_module("fused_adam", str(cuda_modules[module]), _manifest("fused_adam", "gpu", planned))
    assert found is not None
    assert (found.missing, found.extra, found.ok) == (missing, extra, not missing and not extra)
    entry = OpVerification.verdict("aot", None, None, found)
    assert entry is found.ok  # a module that differs from its plan fails verification
    text = OpVerification("fused_adam", entry, "aot", 0.1, None, None, found).problems()
    assert entry or "device code differs from the plan" in text[0]


def test_verification_does_not_audit_cpu_ops_and_reports_an_unreadable_module(tmp_path: Path) -> None:
    assert audit_module("cpu_adam", "/nonexistent.so", _manifest("cpu_adam", "cpu", ())) is None
    junk = tmp_path / "junk.so"
    junk.write_text("not ELF")
    found = audit_module("fused_adam", str(junk), _manifest("fused_adam", "gpu", ("9.0",)))
    assert found is not None and not found.ok and found.found.unreadable
