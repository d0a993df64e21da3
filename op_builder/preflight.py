"""Can this op's module run on this GPU with this driver? One pure decision, made before the
first kernel launch.

Without it the mismatch shows as "no kernel image is available for execution on the device",
raised from inside a job minutes after it started. ``decide`` takes what the device and driver
say and what the module holds (``op_builder.binary.DeviceCode``: SASS, PTX and gfx targets as
found in the file) and returns whether the op can run, how, and if not, why and what to rebuild
with. The rules are the CUDA compatibility rules (CUDA C++ Programming Guide, "Binary
Compatibility", "PTX Compatibility" and "Application Compatibility"; the family-specific
targets of CUDA 12.9's release notes) and ROCm's code-object target rules (LLVM AMDGPU usage,
"Target Features"):

* SASS ``sm_XY`` runs on a device of compute capability X.Z with Z >= Y (same major only).
* ``sm_XYa`` (architecture-specific) runs on X.Y only; ``sm_XYf`` (family-specific) on X.Z, Z >= Y.
* PTX ``compute_XY`` is JIT-compiled by the driver for any capability >= X.Y, ``compute_XYa``
  for X.Y only, ``compute_XYf`` for X.Z, Z >= Y; and only by a driver at least as new as the
  toolkit that wrote the PTX.
* The driver must support the CUDA runtime's major version; within it, an older driver than
  the runtime still runs SASS (minor version compatibility) but cannot JIT newer PTX.
* ``lto_XY`` (LTO-IR) is never loaded by the runtime; it does not count.
* A gfx target runs only on a device of the same processor; a target feature it names
  (``xnack-``, ``sramecc+``) must be the device's setting. AMD GPUs have no JIT: no fallback.

The second half of this module applies the decision to this process: ``check_loaded`` is what
loading an installed GPU op runs (``op_builder.loader``), so that a module without code for this
GPU fails at load with one message instead of "no kernel image is available" from inside a job;
``run_preflight`` is ``python -m op_builder preflight``: every installed op, each with whether it
can run here and why. That half only gathers ``decide``'s inputs; torch is imported inside its
functions, as everywhere in op_builder.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Union

from op_builder.binary import DeviceCode, read_device_code
from op_builder.devices import cuda_gpus, no_gpu_reason
from op_builder.errors import OpLoadError
from op_builder.manifest import Manifest

# The Linux driver each CUDA release ships with (CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"): the driver a user installs to run that runtime in full.
LINUX_DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

_CUDA_TARGET = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)\Z")
_GFX_FEATURE = re.compile(r"(xnack|sramecc)([+-])\Z")


@dataclass(frozen=True)
class CudaDevice:
    name: str
    capability: tuple[int, int]
    # The CUDA version the driver supports (cuDriverGetVersion); None when it cannot be read:
    # the driver rules are then not applied.
    driver_cuda: tuple[int, int] | None


@dataclass(frozen=True)
class RocmDevice:
    name: str
    gfx: str  # as the runtime names it: "gfx90a:sramecc+:xnack-"


@dataclass(frozen=True)
class Decision:
    ok: bool
    reason: str  # how it runs ("SASS sm_90"), or why it cannot
    rebuild_arch: str | None = None  # what --arch to add when the device code is missing


def decide(
    device: CudaDevice | RocmDevice,
    code: DeviceCode,
    runtime_cuda: tuple[int, int] | None = None,
    ptx_toolkit: tuple[int, int] | None = None,
) -> Decision:
    """Whether a module holding ``code`` runs on ``device``.

    ``runtime_cuda``: the CUDA runtime the image's torch was built against; ``ptx_toolkit``: the
    toolkit that compiled the module (its PTX's version; None: assumed the runtime's)."""
    if isinstance(device, RocmDevice):
        return _decide_rocm(device, code)
    return _decide_cuda(device, code, runtime_cuda, ptx_toolkit or runtime_cuda)


def _decide_cuda(
    device: CudaDevice,
    code: DeviceCode,
    runtime: tuple[int, int] | None,
    ptx_toolkit: tuple[int, int] | None,
) -> Decision:
    cc = _cc(device.capability)
    driver = device.driver_cuda
    if runtime is not None and driver is not None and driver[0] < runtime[0]:
        return Decision(
            False,
            f"the driver supports CUDA {_cc(driver)} and this image's CUDA runtime is "
            f"{_cc(runtime)}: {driver_needed(runtime)}",
        )
    sass = [t for t in code.sass if _runs(t, device.capability)]
    if sass:
        return Decision(True, f"SASS {sass[-1]} on {device.name} (compute capability {cc})")
    ptx = [t for t in code.ptx if _runs(t, device.capability)]
    if ptx and ptx_toolkit is not None and driver is not None and driver < ptx_toolkit:
        return Decision(
            False,
            f"{device.name} (compute capability {cc}) has no SASS here, and its PTX ({', '.join(ptx)}) "
            f"was written by CUDA {_cc(ptx_toolkit)}, newer than the driver's CUDA "
            f"{_cc(driver)}: {driver_needed(ptx_toolkit)}, or rebuild with --arch {cc}",
            rebuild_arch=cc,
        )
    if ptx:
        return Decision(True, f"PTX {ptx[-1]} JIT-compiled for {device.name} (compute capability {cc})")
    return Decision(
        False,
        f"no device code for {device.name} (compute capability {cc}): the module holds "
        f"{_holdings(code)}; rebuild with --arch {cc} (or add {cc}+PTX to run on later GPUs too)",
        rebuild_arch=cc,
    )


def _runs(target: str, capability: tuple[int, int]) -> bool:
    match = _CUDA_TARGET.match(target)
    if match is None:
        return False
    kind, major, minor, variant = match[1], int(match[2]), int(match[3]), match[4]
    if variant == "a":
        return capability == (major, minor)
    if variant == "f" or kind == "sm":
        return capability[0] == major and capability[1] >= minor
    return capability >= (major, minor)  # plain PTX: any later device, through the JIT


def _decide_rocm(device: RocmDevice, code: DeviceCode) -> Decision:
    processor, *device_features = device.gfx.split(":")
    settings = _features(device_features)
    for target in code.gfx:
        name, *wanted = target.split(":")
        if name == processor and all(settings.get(k, v) == v for k, v in _features(wanted).items()):
            return Decision(True, f"code object {target} on {device.name} ({device.gfx})")
    return Decision(
        False,
        f"no code object for {device.name} ({device.gfx}): the module holds {_holdings(code)}; "
        f"rebuild with --arch {processor}",
        rebuild_arch=processor,
    )


def _features(parts: Sequence[str]) -> dict[str, str]:
    """``["sramecc+", "xnack-"]`` -> {"sramecc": "+", "xnack": "-"} (a feature not named: any)."""
    return {m[1]: m[2] for m in map(_GFX_FEATURE.match, parts) if m is not None}


def _holdings(code: DeviceCode) -> str:
    parts = [*code.sass, *(f"PTX {p}" for p in code.ptx), *code.gfx]
    return ", ".join(parts) if parts else "no device code"


def _cc(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def driver_needed(cuda: tuple[int, int]) -> str:
    """What driver to install for CUDA ``cuda``, in words."""
    known = LINUX_DRIVER_FOR_CUDA.get(cuda)
    linux = f" (on Linux {known} or newer)" if known else ""
    return f"install a driver for CUDA {_cc(cuda)} or newer{linux}"


def parse_version(text: str | None) -> tuple[int, int] | None:
    """``"12.4"`` / ``"12.4.131"`` -> (12, 4); None for None or what is not a version."""
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def from_driver_int(value: int) -> tuple[int, int]:
    """cuDriverGetVersion's 12040 -> (12, 4)."""
    return value // 1000, (value % 1000) // 10


# --------------------------------------------------------------------------- this process

Device = Union[CudaDevice, RocmDevice]  # Union: images' Pythons from 3.9 run this


@dataclass(frozen=True)
class OpPreflight:
    name: str
    ok: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "reason": self.reason}


@dataclass(frozen=True)
class Preflight:
    ok: bool
    devices: tuple[str, ...]  # "NVIDIA H100 (9.0, driver CUDA 12.8)"; empty without a GPU
    ops: tuple[OpPreflight, ...]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "devices": list(self.devices), "ops": [op.to_json() for op in self.ops]}


def visible_devices() -> tuple[tuple[Device, ...], str]:
    """Each distinct visible GPU, and why there is none when the tuple is empty."""
    try:
        import torch
    except ImportError:
        return (), "torch is not installed"
    found: dict[str, Device] = {}
    if torch.version.hip:
        if not torch.cuda.is_available():
            return (), no_gpu_reason()
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            device = RocmDevice(props.name, str(getattr(props, "gcnArchName", "")))
            found.setdefault(repr(device), device)
        return tuple(found.values()), ""
    # Read without initialising CUDA where it can be, so that an op's load leaves this process
    # free to fork children that use the GPU (op_builder.nvml).
    gpus = cuda_gpus()
    if not gpus:
        return (), no_gpu_reason()
    driver = driver_cuda_version()
    for name, capability in gpus:
        cuda = CudaDevice(name, capability, driver)
        found.setdefault(repr(cuda), cuda)
    return tuple(found.values()), ""


def driver_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the driver supports (``cuDriverGetVersion``; no context needed), or None."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return from_driver_int(version.value)


def describe(device: Device) -> str:
    if isinstance(device, RocmDevice):
        return f"{device.name} ({device.gfx})"
    driver = f", driver CUDA {device.driver_cuda[0]}.{device.driver_cuda[1]}" if device.driver_cuda else ""
    return f"{device.name} ({device.capability[0]}.{device.capability[1]}{driver})"


def decide_module(
    path: str | Path, devices: Sequence[Device], runtime_cuda: str | None, toolkit: str | None
) -> Decision:
    """The first device the module cannot run on, else the decision for the first device."""
    code = read_device_code(path)
    decisions = [decide(d, code, parse_version(runtime_cuda), parse_version(toolkit)) for d in devices]
    return next((d for d in decisions if not d.ok), decisions[0])


def check_loaded(name: str, module: ModuleType, manifest: Manifest) -> None:
    """OpLoadError when installed GPU op ``name``'s module holds no code for a visible GPU;
    nothing without a GPU (no kernel can launch then) or for a module of no file."""
    devices, _ = visible_devices()
    if not devices or not getattr(module, "__file__", None):
        return
    import torch

    decision = decide_module(str(module.__file__), devices, torch.version.cuda, manifest.cuda)
    if not decision.ok:
        raise OpLoadError(
            f"{name}: {decision.reason}",
            hint="python -m op_builder preflight checks every installed op on this machine",
        )


def run_preflight(manifest: Manifest | None, require_gpu: bool) -> Preflight:
    """Every installed op: a CPU op runs anywhere its image runs; a GPU op is checked against
    every visible GPU, or reported as not checkable without one (a failure with ``require_gpu``)."""
    if manifest is None:
        return Preflight(True, (), ())
    devices, no_gpu = visible_devices()
    ops: list[OpPreflight] = []
    for op in sorted(manifest.ops.values(), key=lambda o: o.name):
        if op.target != "gpu":
            ops.append(OpPreflight(op.name, True, "CPU op: runs wherever the image runs"))
        elif not devices:
            ops.append(OpPreflight(op.name, not require_gpu, f"not checkable: {no_gpu}"))
        else:
            ops.append(_check_installed(op.name, op.module, devices, manifest))
    return Preflight(all(op.ok for op in ops), tuple(describe(d) for d in devices), tuple(ops))


def _check_installed(name: str, module: str, devices: Sequence[Device], manifest: Manifest) -> OpPreflight:
    import importlib.util

    import torch

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not os.path.isfile(spec.origin):
        return OpPreflight(name, False, f"its module {module} is not installed")
    decision = decide_module(spec.origin, devices, torch.version.cuda, manifest.cuda)
    return OpPreflight(name, decision.ok, decision.reason)
