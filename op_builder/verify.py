"""Verifying the installed ops: each loads ahead of time, computes right, and holds the GPU code
planned for it.

``verify_ops`` is what ``python -m op_builder verify`` runs, in a built image's build stage and
in imagegen's sealed verify container. Per op, in order:

1. load with JIT disabled: it must come from its ahead-of-time module;
2. a stable build's module (``stable_abi``) takes nothing from torch or Python beyond its target's
   ABI; for a GPU op, read the device code of that module (``binary``) and compare it with the arch
   list the manifest recorded when it was built: every planned arch's SASS, PTX exactly for the
   ``+PTX`` archs, nothing else;
3. run its self-test (the one its builder names; ``op_builder.selftest``) on ``device``; a GPU
   op without a GPU is reported skipped, which passes unless ``require_gpu``.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from typing import Literal

from op_builder import binary, settings, stable_abi
from op_builder.errors import UserFacingError
from op_builder.loader import LoadedOp, load_op
from op_builder.manifest import Manifest
from op_builder.registry import get_builder
from op_builder.report import OpVerification, SelfTestResult, VerifyReport

DeviceChoice = Literal["cpu", "cuda", "auto"]


def verify_ops(
    names: Sequence[str],
    env: Mapping[str, str],
    manifest: Manifest | None,
    *,
    selftest: bool = True,
    device: DeviceChoice = "auto",
    require_gpu: bool = False,
) -> VerifyReport:
    """Verify ``names`` (known op names). Never raises for an op: each failure is in its entry."""
    # Deferred: torch (and every kernel front, for the self-tests) costs seconds to import, and
    # the other op_builder commands must not pay it.
    import torch

    sealed = {**env, settings.DISABLE_JIT.name: "1"}  # verification proves the AOT modules: never compile
    loaded: dict[str, LoadedOp] = {}
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in names:
        start = time.perf_counter()
        try:
            loaded[name] = load_op(get_builder(name), sealed)
        except UserFacingError as exc:
            errors[name] = exc.message
        seconds[name] = round(time.perf_counter() - start, 6)
    here = platform.machine()
    audits: dict[str, binary.Audit | None] = {}
    machines: dict[str, str] = {}
    for name, op in loaded.items():
        if op.source != "aot":
            continue
        path = getattr(op.module, "__file__", None)
        audits[name] = audit_module(name, path, manifest)
        if path is None:
            continue
        machines[name] = module_machine(path)
        if machines[name] != here:  # never loads, but a module copied in by hand is said plainly
            errors[name] = f"its module {path} is {machines[name]} code, and this machine is {here}"
        elif (broken := stable_abi_break(name, path, manifest)) is not None:
            errors[name] = broken
    tests = _selftests([n for n in names if n in loaded], device, sealed) if selftest else {}
    results = []
    for name in names:
        source = loaded[name].source if name in loaded else None
        error = errors.get(name)
        audit, test = audits.get(name), tests.get(name)
        ok = OpVerification.verdict(source, error, test, audit, require_gpu)
        results.append(
            OpVerification(name, ok, source, seconds[name], error, test, audit, machines.get(name))
        )
    return VerifyReport(torch.__version__, torch.version.cuda, torch.version.hip, tuple(results), here)


def stable_abi_break(name: str, path: str, manifest: Manifest | None) -> str | None:
    """Why op ``name``'s stable module at ``path`` breaks its target's ABI (a torch C++ symbol, a
    newer C shim, a Python symbol outside abi3); None when it keeps it or is not a stable build."""
    entry = manifest.ops.get(name) if manifest is not None else None
    if entry is None or entry.stable_abi is None:
        return None
    try:
        report = stable_abi.check_module(path, entry.stable_abi)
    except UserFacingError as exc:
        return exc.message
    if report.ok:
        return None
    return f"its module {path} breaks the stable ABI of torch {entry.stable_abi}: {report.describe()}"


def module_machine(path: str) -> str:
    """The machine a module's code is for (``binary.elf_machine``), or why it could not be read."""
    try:
        return binary.elf_machine(path)
    except UserFacingError as exc:
        return f"unreadable ({exc.message})"


def audit_module(name: str, path: str | None, manifest: Manifest | None) -> binary.Audit | None:
    """The device-code audit of GPU op ``name``'s module file against the archs the manifest
    planned for it; None for CPU ops and ops the manifest does not list (they hold no plan)."""
    entry = manifest.ops.get(name) if manifest is not None else None
    if entry is None or entry.target != "gpu":
        return None
    if path is None:
        found = binary.DeviceCode(unreadable=(f"{name}: the loaded module has no file to read",))
        return binary.audit(found, entry.archs)
    try:
        found = binary.read_device_code(path)
    except UserFacingError as exc:
        found = binary.DeviceCode(unreadable=(exc.message,))
    return binary.audit(found, entry.archs)


def _selftests(
    names: Sequence[str], device: DeviceChoice, env: Mapping[str, str]
) -> dict[str, SelfTestResult]:
    if not names:
        return {}
    # Deferred: the self-tests import torch and their ops' fronts (see the module docstring).
    from op_builder.selftest.harness import resolve_device
    from op_builder.selftest.runner import run_selftests

    report = run_selftests(names, resolve_device(device), env)
    return {result.name: result for result in report.ops}
