"""Loading ops: the installed (ahead-of-time) module when it fits, else a cached JIT build.

The JIT path keeps torch's compiler driver (``torch.utils.cpp_extension.load``)
but owns two things torch gets wrong for shared clusters:

* **Locking.** torch guards a build directory with a plain ``lock`` file that
  has no owner: a build killed midway leaves it behind and every later load
  waits forever. We take an ``fcntl.flock`` on a sibling file first. The kernel
  releases it when its holder dies, so a stale torch ``lock`` seen while we hold
  ours can only be debris, and we remove it.
* **Fast cached loads.** The build directory is named after a hash of the
  sources, headers, flags and torch version; when its module exists we import it
  directly, without re-running ninja or any probe.

torch is imported inside the functions that need it, on purpose: ``import op_builder``
(setup.py, ``plan``, ``report``) must not pay for importing torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal, Protocol

from op_builder import includes, settings, stable_abi
from op_builder import toolchain as tc
from op_builder.context import (
    BuildContext,
    OpFlags,
    align_torch_cuda_home,
    cxx_standard,
    resolve_context,
    visible_gpu_capabilities,
)
from op_builder.devices import import_cpp_extension
from op_builder.env import env_flag
from op_builder.errors import OpLoadError, UserFacingError
from op_builder.manifest import Manifest, read_installed
from op_builder.preflight import check_loaded
from op_builder.stable_module import as_op_module
from op_builder.toolchain import LibrarySpec, Toolchain

Source = Literal["aot", "jit"]


class LoadableOp(Protocol):
    """What loading needs of an op builder (``builder.OpBuilder`` is one).

    A protocol rather than the class, so that the builder can offer ``load()`` by calling
    this module without the two importing each other.
    """

    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def build_variable(self) -> str: ...
    def system_library_specs(self) -> tuple[LibrarySpec, ...]: ...
    def all_runtime_packages(self) -> tuple[str, ...]: ...
    def flags(self, ctx: BuildContext) -> OpFlags: ...
    def incompatibility(self, ctx: BuildContext) -> str | None: ...


@dataclass(frozen=True)
class LoadedOp:
    name: str
    module: ModuleType
    source: Source
    seconds: float
    compiled: bool = False  # True when this call ran the compiler


_LOADED: dict[str, LoadedOp] = {}


def load_op(builder: LoadableOp, env: Mapping[str, str]) -> LoadedOp:
    """Load ``builder``'s op once per process; raise OpLoadError with the reason."""
    cached = _LOADED.get(builder.name)
    if cached is not None:
        return cached
    start = time.perf_counter()
    module, reason = _load_installed(builder)
    if module is not None:
        loaded = LoadedOp(builder.name, module, "aot", time.perf_counter() - start)
    else:
        if env.get(settings.DISABLE_JIT.name) == "1":
            raise OpLoadError(
                f"{builder.name}: {reason}, and JIT builds are disabled (DS_DISABLE_JIT=1)",
                hint=f"build it in ahead of time with {builder.build_variable}=1, or unset DS_DISABLE_JIT",
            )
        module, compiled = _jit_load(builder, env)
        loaded = LoadedOp(builder.name, module, "jit", time.perf_counter() - start, compiled)
    _LOADED[builder.name] = loaded
    return loaded


def _load_installed(builder: LoadableOp) -> tuple[ModuleType | None, str]:
    """(module, "") when the installed build fits this torch, else (None, why not)."""
    manifest = read_installed()
    entry = manifest.ops.get(builder.name) if manifest is not None else None
    if manifest is None or entry is None:
        return None, "not installed ahead of time"
    import torch

    if entry.stable_abi is not None:
        refusal = stable_abi.load_refusal(
            entry.stable_abi, torch.__version__, _built_gpu(manifest, builder.target), _running_gpu(torch)
        )
        if refusal is not None:
            return None, f"the installed module is {refusal}"
    elif manifest.torch != torch.__version__:
        return None, f"installed for torch {manifest.torch}, but this is torch {torch.__version__}"
    try:
        module = as_op_module(importlib.import_module(entry.module))
    except ImportError as exc:  # e.g. a runtime library (libaio.so.1) missing from the image
        raise OpLoadError(
            f"{builder.name}: the installed module {entry.module} does not import: {exc}",
            hint="install the op's runtime packages: " + (" ".join(builder.all_runtime_packages()) or "none"),
        ) from None
    if builder.target == "gpu":
        # Here, not at the first launch deep in a job: no code for this GPU, or too old a driver.
        check_loaded(builder.name, module, manifest)
    return module, ""


def _built_gpu(manifest: Manifest, target: str) -> tuple[str, str | None]:
    """("cuda" | "hip", toolkit version) a GPU op was built with; ("", None) for a CPU op."""
    if target != "gpu":
        return "", None
    return ("hip", manifest.hip) if manifest.hip else ("cuda", manifest.cuda)


def _running_gpu(torch: ModuleType) -> tuple[str, str | None]:
    if torch.version.hip:
        return "hip", str(torch.version.hip)
    if torch.version.cuda:
        return "cuda", str(torch.version.cuda)
    return "", None


# ------------------------------------------------------------------ JIT


def _flags_context(builder: LoadableOp, env: Mapping[str, str]) -> BuildContext:
    """The context that decides the flags. CPU ops need no probe for that."""
    if builder.target == "cpu":
        nothing = Toolchain(torch=None, cuda=None, rocm=None, cxx=None, ninja=None, libraries={})
        return _cpu_context(nothing, env)
    return _probed_context(builder, env)


def _cpu_context(host: Toolchain, env: Mapping[str, str]) -> BuildContext:
    """CPU ops build the same on every target; only the C++ standard follows torch."""
    import torch

    headers = env.get(settings.STABLE_HEADERS.name, "").strip()
    return BuildContext(
        accelerator="cpu",
        toolchain=host,
        cpu_native=bool(env_flag(env, settings.CPU_NATIVE.name)),
        cxx_std=cxx_standard(torch.__version__),
        torch_version=torch.__version__,
        stable_headers=stable_abi.pinned_headers(headers, settings.STABLE_HEADERS.name) if headers else None,
    )


def _probed_context(builder: LoadableOp, env: Mapping[str, str]) -> BuildContext:
    """The context for an actual compile: probe only what this op's target needs."""
    libraries = builder.system_library_specs()
    if builder.target == "cpu":  # CPU ops build the same on every target: no GPU toolkit probes
        cxx = env.get(settings.CXX.name, "c++")
        host = Toolchain(
            torch=None,
            cuda=None,
            rocm=None,
            cxx=tc.probe_cxx(env),
            ninja=tc.probe_ninja(env),
            libraries={n: tc.probe_library(n, h, s, cxx) for n, h, s in libraries},
        )
        return _cpu_context(host, env)
    return resolve_context(env, tc.probe(env, libraries), visible_gpu_capabilities)


def build_key(flags: OpFlags) -> str:
    """Hash of everything that changes the binary: sources, headers, flags, torch, Python."""
    import torch

    described = flags.to_json()
    # nvcc's --threads changes how fast it compiles, not what: the default follows the job
    # budget (MAX_JOBS, CPUs), which must not send a cached load to a new build.
    described["device"] = [f for f in flags.device if not f.startswith("--threads")]
    digest = hashlib.sha256()
    digest.update(json.dumps(described, sort_keys=True).encode())
    digest.update(f"{torch.__version__}|{sys.version_info[:2]}|{sys.platform}".encode())
    for path in included_files(flags):
        digest.update(str(path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def included_files(flags: OpFlags) -> list[Path]:
    """The op's sources plus every project header they include (or name by a macro), transitively.

    Only headers that resolve inside the source's folder or the op's include dirs
    count: system and torch headers are covered by the torch version in the key,
    and another op's header changing must not rebuild this one.
    """
    found = includes.scan((Path(s) for s in flags.sources), [Path(d) for d in flags.include_dirs])
    return list(found.files)


def extensions_root(env: Mapping[str, str]) -> Path:
    """TORCH_EXTENSIONS_DIR, or torch's per-user default, split by Python and torch build."""
    import torch
    from torch import _appdirs

    # Same default as torch.utils.cpp_extension.get_default_build_root, without
    # importing that module (it pulls in setuptools: ~0.2 s on every cached load).
    root = env.get(settings.EXTENSIONS_DIR.name) or os.path.realpath(
        _appdirs.user_cache_dir(appname="torch_extensions")  # type: ignore[no-untyped-call]
    )
    flavour = (
        f"rocm{torch.version.hip}"
        if torch.version.hip
        else f"cu{torch.version.cuda}"
        if torch.version.cuda
        else "cpu"
    ).replace(".", "")
    return Path(root, f"py{sys.version_info[0]}{sys.version_info[1]}_{flavour}")


def _import_from(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise OpLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def exclusive_lock(path: Path, waiting_message: str) -> Iterator[None]:
    """An flock the kernel drops if this process dies, so no lock outlives its holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(waiting_message, file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _jit_load(builder: LoadableOp, env: Mapping[str, str]) -> tuple[ModuleType, bool]:
    try:
        flags = builder.flags(_flags_context(builder, env))
        key = build_key(flags)
        root = extensions_root(env)
    except UserFacingError as exc:
        raise OpLoadError(f"{builder.name}: {exc.message}", hint=exc.hint) from None
    module_name = f"{builder.name}_{key}"
    build_dir = root / module_name
    library = build_dir / f"{module_name}.so"
    if library.exists():
        return as_op_module(_import_from(library, module_name)), False
    try:
        with exclusive_lock(
            root / f"{module_name}.flock",
            f"op_builder: waiting for another process that is building {builder.name} in {build_dir}",
        ):
            if library.exists():  # built by the process we waited for
                return as_op_module(_import_from(library, module_name)), False
            _compile(builder, env, module_name, build_dir)
    except PermissionError as exc:
        raise OpLoadError(
            f"{builder.name}: cannot write the JIT cache ({exc})",
            hint="set TORCH_EXTENSIONS_DIR to a writable directory, or install the op ahead of time",
        ) from None
    return as_op_module(_import_from(library, module_name)), True


def _compile(builder: LoadableOp, env: Mapping[str, str], module_name: str, build_dir: Path) -> None:
    try:
        ctx = _probed_context(builder, env)
    except UserFacingError as exc:
        raise OpLoadError(f"{builder.name}: {exc.message}", hint=exc.hint) from None
    reason = builder.incompatibility(ctx)
    if reason is not None:
        raise OpLoadError(f"{builder.name} cannot be built here: {reason}")
    if ctx.toolchain.ninja is None:
        raise OpLoadError(
            f"{builder.name}: JIT builds need ninja, which is not installed",
            hint="pip install ninja",
        )
    flags = builder.flags(ctx)
    align_torch_cuda_home(ctx)
    build_dir.mkdir(parents=True, exist_ok=True)
    # We hold the flock: a torch baton here was left by a build that died.
    (build_dir / "lock").unlink(missing_ok=True)
    print(
        f"op_builder: compiling {builder.name} just in time (first use; cached in {build_dir})",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    # Only a compile needs torch's extension module, which pulls in setuptools (~0.2 s).
    load = import_cpp_extension().load
    limited = stable_abi.LIMITED_API_DEFINES if flags.stable_abi is not None else ()
    try:
        load(
            name=module_name,
            sources=list(flags.sources),
            # Ahead of time, py_limited_api=True has torch define Py_LIMITED_API; here we do.
            extra_cflags=[*flags.cxx, *limited],
            extra_cuda_cflags=[*flags.device, *limited] or None,
            extra_ldflags=[*flags.ldflags, *(f"-l{lib}" for lib in flags.libraries)],
            extra_include_paths=list(flags.compile_include_dirs),
            build_directory=str(build_dir),
            verbose=env.get(settings.JIT_VERBOSE.name) == "1",
        )
    except (RuntimeError, OSError, ImportError) as exc:
        tail = "\n".join(str(exc).strip().splitlines()[-15:])
        raise OpLoadError(
            f"{builder.name}: the JIT build failed:\n{tail}",
            hint=f"rerun with DS_JIT_VERBOSE=1 for the full compiler output (build dir {build_dir})",
        ) from None
    print(
        f"op_builder: compiled {builder.name} in {time.perf_counter() - start:.1f}s",
        file=sys.stderr,
        flush=True,
    )
