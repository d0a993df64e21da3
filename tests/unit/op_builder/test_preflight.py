"""The preflight decision, by table: which device code runs on which GPU and driver.

Expected verdicts are written from the CUDA Programming Guide's compatibility rules and ROCm's
target rules (cited in op_builder/preflight.py), one row per rule and per edge of it, not
derived from the code under test.
"""

from __future__ import annotations

import pytest

from op_builder.binary import DeviceCode
from op_builder.preflight import CudaDevice, RocmDevice, decide, from_driver_int, parse_version

H100 = CudaDevice("NVIDIA H100", (9, 0), (12, 8))
A100 = CudaDevice("NVIDIA A100", (8, 0), (12, 8))
L40S = CudaDevice("NVIDIA L40S", (8, 9), (12, 8))
B200 = CudaDevice("NVIDIA B200", (10, 0), (13, 0))
GB300 = CudaDevice("NVIDIA GB300", (10, 3), (13, 0))
RTX5090 = CudaDevice("NVIDIA RTX 5090", (12, 0), (13, 0))


def code(sass: tuple[str, ...] = (), ptx: tuple[str, ...] = (), other: tuple[str, ...] = ()) -> DeviceCode:
    return DeviceCode(sass=sass, ptx=ptx, other=other)


CUDA_CASES = [
    # (device, code, runtime, ptx toolkit, runs)
    pytest.param(H100, code(("sm_80", "sm_90")), (12, 8), None, True, id="sass-exact"),
    pytest.param(L40S, code(("sm_80", "sm_86")), (12, 8), None, True, id="sass-same-major-lower-minor"),
    pytest.param(A100, code(("sm_86",)), (12, 8), None, False, id="sass-higher-minor-does-not-run"),
    pytest.param(H100, code(("sm_80", "sm_86")), (12, 8), None, False, id="sass-older-major-does-not-run"),
    pytest.param(B200, code(("sm_90",)), (13, 0), None, False, id="sass-never-across-majors"),
    pytest.param(H100, code(("sm_80",), ("compute_80",)), (12, 8), None, True, id="ptx-jit-forward"),
    pytest.param(B200, code(("sm_90",), ("compute_90",)), (13, 0), None, True, id="ptx-jit-next-major"),
    pytest.param(A100, code((), ("compute_90",)), (12, 8), None, False, id="ptx-newer-than-device"),
    pytest.param(H100, code(("sm_90a",)), (12, 8), None, True, id="arch-specific-exact"),
    pytest.param(
        B200, code(("sm_90a",), ("compute_90a",)), (13, 0), None, False, id="arch-specific-elsewhere"
    ),
    pytest.param(GB300, code(("sm_100f",)), (13, 0), None, True, id="family-later-minor"),
    pytest.param(
        RTX5090, code(("sm_100f",), ("compute_100f",)), (13, 0), None, False, id="family-other-major"
    ),
    pytest.param(GB300, code((), ("compute_100f",)), (13, 0), None, True, id="family-ptx"),
    pytest.param(GB300, code(("sm_100a",)), (13, 0), None, False, id="arch-specific-not-family"),
    pytest.param(H100, code(other=("lto_90",)), (12, 8), None, False, id="lto-ir-is-not-loadable"),
    pytest.param(H100, code(()), (12, 8), None, False, id="nothing"),
    # The driver: an older major cannot run the runtime; an older minor still runs SASS
    # (minor version compatibility) but cannot JIT PTX a newer toolkit wrote.
    pytest.param(
        CudaDevice("H100", (9, 0), (11, 8)), code(("sm_90",)), (12, 4), None, False, id="driver-major"
    ),
    pytest.param(
        CudaDevice("H100", (9, 0), (12, 2)), code(("sm_90",)), (12, 4), None, True, id="driver-minor-sass"
    ),
    pytest.param(
        CudaDevice("H100", (9, 0), (12, 2)),
        code((), ("compute_80",)),
        (12, 4),
        (12, 4),
        False,
        id="driver-minor-ptx",
    ),
    pytest.param(
        CudaDevice("H100", (9, 0), (12, 4)),
        code((), ("compute_80",)),
        (12, 4),
        (12, 4),
        True,
        id="driver-equal-ptx",
    ),
]


@pytest.mark.parametrize(("device", "found", "runtime", "toolkit", "runs"), CUDA_CASES)
def test_cuda_decision(
    device: CudaDevice,
    found: DeviceCode,
    runtime: tuple[int, int],
    toolkit: tuple[int, int] | None,
    runs: bool,
) -> None:
    decision = decide(device, found, runtime, toolkit)
    assert decision.ok is runs, decision.reason


def test_a_missing_arch_names_the_gpu_what_the_image_holds_and_the_arch_to_add() -> None:
    decision = decide(H100, code(("sm_80", "sm_86")), (12, 8))
    assert not decision.ok and decision.rebuild_arch == "9.0"
    for part in ("NVIDIA H100", "compute capability 9.0", "sm_80, sm_86", "--arch 9.0"):
        assert part in decision.reason


def test_an_old_driver_is_told_which_driver_to_install() -> None:
    decision = decide(CudaDevice("H100", (9, 0), (11, 8)), code(("sm_90",)), (12, 4))
    assert "CUDA 12.4" in decision.reason and "550.54.14" in decision.reason
    unknown = decide(CudaDevice("H100", (9, 0), (12, 2)), code((), ("compute_90",)), (13, 9), (13, 9))
    assert not unknown.ok and "CUDA 13.9 or newer" in unknown.reason


def test_ptx_from_a_newer_toolkit_than_the_driver_says_both() -> None:
    decision = decide(CudaDevice("H100", (9, 0), (12, 4)), code((), ("compute_80",)), (12, 4), (12, 8))
    assert not decision.ok and "CUDA 12.8" in decision.reason and "570.26" in decision.reason


MI250 = RocmDevice("AMD Instinct MI250X", "gfx90a:sramecc+:xnack-")


@pytest.mark.parametrize(
    ("targets", "runs"),
    [
        (("gfx90a",), True),  # no feature named: runs with either setting
        (("gfx90a:xnack-",), True),
        (("gfx90a:sramecc+:xnack-",), True),
        (("gfx90a:xnack+",), False),  # built for XNACK on, the device has it off
        (("gfx942", "gfx1030"), False),
        (("gfx90",), False),  # a prefix of the name is another processor
        ((), False),
    ],
)
def test_rocm_decision(targets: tuple[str, ...], runs: bool) -> None:
    decision = decide(MI250, DeviceCode(gfx=targets))
    assert decision.ok is runs, decision.reason
    if not runs:
        assert decision.rebuild_arch == "gfx90a" and "--arch gfx90a" in decision.reason


def test_versions_as_the_runtime_and_driver_give_them() -> None:
    assert from_driver_int(12040) == (12, 4) and from_driver_int(13000) == (13, 0)
    assert parse_version("12.4.131") == (12, 4) and parse_version(None) is None and parse_version("x") is None
