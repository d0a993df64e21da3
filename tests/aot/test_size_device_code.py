"""Each device-code entry's bytes (``imagegen.proof.size_probe.device_bytes``) on modules the
local nvcc compiles: the names are what op_builder's reader lists, and the bytes an arch adds are
what the ``.nv_fatbin`` section grows by when that arch is compiled too, as readelf reads it; a
gfx target's bytes are the code object clang-offload-bundler unbundles for it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagegen.proof.size_probe import device_bytes
from op_builder.binary import read_device_code

NVCC = shutil.which("nvcc")
READELF = shutil.which("readelf")
pytestmark = pytest.mark.skipif(
    NVCC is None or READELF is None, reason="no CUDA toolkit (nvcc) or no readelf on this machine"
)

KERNELS = """
__device__ int at() { return blockIdx.x * blockDim.x + threadIdx.x; }
__global__ void scale(float* x, float a, int n) { int i = at(); if (i < n) x[i] *= a; }
__global__ void add(float* x, const float* y, int n) { int i = at(); if (i < n) x[i] += 2.0f * y[i]; }
void launch(float* x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""


def _module(tmp: Path, name: str, codes: list[tuple[str, str]], compress: str = "none") -> Path:
    source = tmp / "kernels.cu"
    source.write_text(KERNELS)
    out = tmp / f"{name}.so"
    gencode = [f"-gencode=arch={arch},code={code}" for arch, code in codes]
    command = [str(NVCC), "-shared", "-Xcompiler", "-fPIC", f"-compress-mode={compress}", *gencode]
    subprocess.run([*command, str(source), "-o", str(out)], check=True, capture_output=True)
    return out


def _fatbin_section(path: Path, field: int = 3) -> int:
    """The .nv_fatbin section's size (``field`` 2: its offset in the file), from readelf."""
    listing = subprocess.run([str(READELF), "-SW", str(path)], check=True, capture_output=True, text=True)
    match = re.search(r"\.nv_fatbin\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", listing.stdout)
    assert match, listing.stdout
    return int(match[field], 16)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("size-fatbin")
    sm80, sm90, ptx90 = ("compute_80", "sm_80"), ("compute_90", "sm_90"), ("compute_90", "compute_90")
    return {
        "80": _module(tmp, "a80", [sm80]),
        "80_90": _module(tmp, "a80_90", [sm80, sm90]),
        "80_90_ptx": _module(tmp, "a80_90_ptx", [sm80, sm90, ptx90]),
        "80_90_ptx_size": _module(tmp, "a80_90_ptx_size", [sm80, sm90, ptx90], compress="size"),
    }


def test_names_are_what_op_builder_reads(modules: dict[str, Path]) -> None:
    for path in modules.values():
        assert set(device_bytes(str(path))) == set(read_device_code(path).names()), path.name


def test_an_arch_adds_its_entry_to_the_section(modules: dict[str, Path]) -> None:
    one, two, ptx = (device_bytes(str(modules[k])) for k in ("80", "80_90", "80_90_ptx"))
    # Each module's fatbin section: its entries, one 16-byte container header, zero padding to 8.
    for key in ("80", "80_90", "80_90_ptx"):
        entries = sum(device_bytes(str(modules[key])).values())
        assert 0 <= _fatbin_section(modules[key]) - (entries + 16) < 64, key
    # The same code whatever else is compiled; its entry header (which names the build's options)
    # may differ by a few bytes.
    assert abs(one["sm_80"] - two["sm_80"]) < 64 and abs(two["sm_80"] - ptx["sm_80"]) < 64
    # What compiling sm_90 too adds to the section is the sm_90 entry (and sm_80's header change).
    grown = _fatbin_section(modules["80_90"]) - _fatbin_section(modules["80"])
    assert abs(grown - (two["sm_90"] + two["sm_80"] - one["sm_80"])) < 16
    grown = _fatbin_section(modules["80_90_ptx"]) - _fatbin_section(modules["80_90"])
    assert abs(grown - (sum(ptx.values()) - sum(two.values()))) < 16
    assert ptx["compute_90"] > 0 and two["sm_90"] > ptx["compute_90"]  # SASS is larger than its PTX here


def test_compressed_entries_are_counted_as_stored(modules: dict[str, Path]) -> None:
    plain, small = device_bytes(str(modules["80_90_ptx"])), device_bytes(str(modules["80_90_ptx_size"]))
    assert set(plain) == set(small)
    assert sum(small.values()) < sum(plain.values())
    entries = sum(small.values())
    assert 0 <= _fatbin_section(modules["80_90_ptx_size"]) - (entries + 16) < 64
    assert device_bytes(str(modules["80"])) != {} and _fatbin_section(modules["80"]) > 0


def test_a_corrupt_fatbin_is_an_error_not_a_size(modules: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken.so"
    data = bytearray(modules["80_90"].read_bytes())
    at = _fatbin_section(modules["80_90"], field=2)
    data[at : at + 4] = b"\x00\x00\x00\x01"  # no container magic where the first one starts
    broken.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="no fatbin container"):
        device_bytes(str(broken))


HIPCC = shutil.which("hipcc")
OBJCOPY = shutil.which("objcopy")
BUNDLER = next(iter(sorted(Path("/usr/lib").glob("llvm-*/bin/clang-offload-bundler"))), None)
HIP_KERNEL = "#include <hip/hip_runtime.h>\n" + KERNELS


@pytest.mark.skipif(
    HIPCC is None or OBJCOPY is None or BUNDLER is None,
    reason="no hipcc, objcopy or clang-offload-bundler (`scripts/system-deps.sh --rocm`: Debian's ROCm 5.2)",
)
def test_each_gfx_entry_is_the_code_object_the_bundler_unbundles(tmp_path: Path) -> None:
    (tmp_path / "kernels.hip").write_text(HIP_KERNEL)
    module = tmp_path / "kernels.so"
    targets = ("gfx90a", "gfx1030")
    command = [str(HIPCC), *(f"--offload-arch={t}" for t in targets), "-fPIC", "-shared", "kernels.hip"]
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    subprocess.run([*command, "-o", str(module)], cwd=tmp_path, env=env, check=True, capture_output=True)
    found = device_bytes(str(module))
    assert set(found) == set(read_device_code(module).names()) == set(targets)
    section = tmp_path / "hip_fatbin.bin"
    subprocess.run(
        [str(OBJCOPY), "-O", "binary", "--only-section=.hip_fatbin", str(module), str(section)], check=True
    )
    for target in targets:
        out = tmp_path / f"{target}.co"
        unbundle = [str(BUNDLER), "--unbundle", "--type=o", f"--targets=hipv4-amdgcn-amd-amdhsa--{target}"]
        subprocess.run([*unbundle, f"--input={section}", f"--output={out}"], check=True, capture_output=True)
        assert found[target] == out.stat().st_size, target
