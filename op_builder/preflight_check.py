"""The preflight applied to this process: its GPUs and driver against the installed modules.

``check_loaded`` is what loading an installed GPU op runs (``op_builder.loader``), so that a
module without code for this GPU fails at load with one message instead of "no kernel image is
available" from inside a job; ``run_preflight`` is ``python -m op_builder preflight``: every
installed op, each with whether it can run here and why. The decision itself is
``op_builder.preflight.decide``; this module only gathers its inputs. torch is imported inside
the functions, as everywhere in op_builder.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Union

from op_builder.binary import read_device_code
from op_builder.devices import no_gpu_reason
from op_builder.errors import OpLoadError
from op_builder.manifest import Manifest
from op_builder.preflight import CudaDevice, Decision, RocmDevice, decide, from_driver_int, parse_version

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
    if not torch.cuda.is_available():
        return (), no_gpu_reason()
    found: dict[str, Device] = {}
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        device: Device
        if torch.version.hip:
            device = RocmDevice(props.name, str(getattr(props, "gcnArchName", "")))
        else:
            device = CudaDevice(props.name, (props.major, props.minor), driver_cuda_version())
        found.setdefault(repr(device), device)
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
