"""Compile every op's host code against the headers of one torch release.

The CPU ops compile whole (every ``.cpp``), the GPU ops their ``.cpp`` bindings (their device
code is ``device``'s). Each source gets the flags ``op_builder`` gives its op in a build for that
torch release: the context is resolved from this host's probed toolchain with torch replaced by
the release asked for, so the C++ standard (``op_builder.context.cxx_standard``) and every
define follow op_builder's own rules. ``-O0 -w`` come last: the question is whether the code
compiles against that torch's API, not how fast it runs; objects go to a temporary folder.

A result is cached under ``~/.cache/imagegen/compat/`` by a key of the torch release, the
source and the command line, with the digest of every file of the checkout the compile read
(the compiler's own dependency list, ``-MD``), so a re-run compiles only what an edit reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from packaging.version import Version

from imagegen import settings
from op_builder import settings as op_settings
from op_builder import stable_abi
from op_builder.builder import PREFIX_MAP, OpBuilder
from op_builder.context import BuildContext, resolve_context
from op_builder.paths import PACKAGE_ROOT
from op_builder.toolchain import Toolchain, TorchBuild

# The arch list GPU ops' flags are resolved with (it only adds defines such as BF16_AVAILABLE
# to the bindings' flags; 8.0 keeps them on, as every standard image does).
BINDING_ARCHS = "8.0;9.0"
# The pip wheels of torch before 2.7 were built with the pre-C++11 libstdc++ ABI, and torch's
# extension builder compiles extensions to match (torch._C._GLIBCXX_USE_CXX11_ABI).
CXX11_ABI_SINCE = Version("2.7")


@dataclass(frozen=True)
class Job:
    torch: str  # the release: "2.5.1"
    op: str
    source: str  # relative to the checkout
    command: tuple[str, ...]  # "{obj}" stands for the object file
    key: str
    # The compiler writes its dependency list (-MD -MF) where it runs here; in a container the
    # files of the op's include dirs stand for it.
    depfile: bool = True
    coarse_deps: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()  # the op's folders: a dependency in them invalidates the result


@dataclass(frozen=True)
class Outcome:
    torch: str
    op: str
    source: str
    ok: bool
    seconds: float
    key: str
    output: str = ""
    cached: bool = False


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    base = env.get(settings.XDG_CACHE_HOME.name) or str(Path.home() / ".cache")
    return Path(base) / "imagegen" / "compat"


def torch_include_dirs(include: Path) -> list[Path]:
    """What torch's extension builder puts on the include path (``cpp_extension.include_paths``)."""
    dirs = [include, include / "torch" / "csrc" / "api" / "include", include / "TH", include / "THC"]
    return [d for d in dirs if d.is_dir()]


def context_for(torch: str, accelerator: str, toolchain: Toolchain) -> BuildContext:
    """The build context op_builder resolves for ``torch`` on this host."""
    env = {op_settings.ACCELERATOR.name: accelerator}
    if accelerator == "cuda":
        env[op_settings.CUDA_ARCH_LIST.name] = BINDING_ARCHS
    # torch's CUDA version stays unset: the device toolkit is device's question, not this one's.
    return resolve_context(env, replace(toolchain, torch=TorchBuild(torch, None, None)))


def host_sources(builder: OpBuilder, ctx: BuildContext) -> list[str]:
    """The sources the host compiler compiles for ``builder``: the CPU ops' all, the GPU ops' ``.cpp``."""
    return [s for s in builder.flags(ctx).sources if s.endswith(".cpp")]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def include_files(include_dirs: Iterable[str]) -> tuple[str, ...]:
    """Every file of ``include_dirs``: the dependencies of a compile whose list cannot be had."""
    return tuple(sorted(str(p) for d in include_dirs for p in Path(d).rglob("*") if p.is_file()))


def job_key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def own_deps(paths: Iterable[str], roots: Sequence[str]) -> dict[str, str]:
    """Digests of the files among ``paths`` under ``roots`` (the op's own folders; torch's
    headers are keyed by the release, the system's do not change under a check)."""
    deps: dict[str, str] = {}
    for path in paths:
        resolved = Path(path) if os.path.isabs(path) else PACKAGE_ROOT / path
        if resolved.is_file() and any(resolved.resolve().is_relative_to(r) for r in roots):
            deps[os.path.relpath(resolved, PACKAGE_ROOT)] = file_digest(resolved)
    return dict(sorted(deps.items()))


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule as ``g++ -MD`` / ``nvcc -MD`` write it."""
    _, _, rest = text.partition(": ")
    return [t for t in rest.replace("\\\n", " ").split() if t != "\\"]


def jobs_for(
    torch: str,
    include: Path,
    ops: Mapping[str, OpBuilder],
    toolchain: Toolchain,
    cuda_include: Path | None,
    compiler: str = "g++",
) -> list[Job]:
    """One compile job per host source of each op, for torch release ``torch``.

    GPU ops need the CUDA runtime's headers (torch's c10/cuda includes them): without
    ``cuda_include`` they get no jobs here, and the caller says so.
    """
    abi = int(Version(torch) >= CXX11_ABI_SINCE)
    system = [
        *(f"-I{d}" for d in torch_include_dirs(include)),
        f"-I{sysconfig.get_paths()['include']}",
    ]
    jobs: list[Job] = []
    for name, builder in ops.items():
        gpu = builder.target == "gpu"
        if gpu and cuda_include is None:
            continue
        ctx = context_for(torch, "cuda" if gpu else "cpu", toolchain)
        flags = builder.flags(ctx)
        extra = [f"-I{cuda_include}"] if gpu else []
        for source in host_sources(builder, ctx):
            command = (
                compiler,
                *flags.cxx,
                "-O0",
                "-w",  # torch's own headers warn; errors are the question
                "-fPIC",
                f"-DTORCH_EXTENSION_NAME={name}",
                "-DTORCH_API_INCLUDE_EXTENSION_H",
                f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                # A stable build's (torch >= 2.10) limited API, as its real build defines it.
                *(stable_abi.LIMITED_API_DEFINES if flags.stable_abi is not None else ()),
                *(f"-I{d}" for d in flags.include_dirs),
                *system,
                *extra,
                "-c",
                source,
                "-o",
                "{obj}",
            )
            relative = os.path.relpath(source, PACKAGE_ROOT)
            # The key names no folder of this machine: the same sources and flags share it anywhere.
            # (The path maps name this machine's folders only to take them out of the object.)
            portable = [_portable(arg, include) for arg in command if not arg.startswith(PREFIX_MAP)]
            key = job_key(torch, relative, portable)
            jobs.append(
                Job(
                    torch,
                    name,
                    relative,
                    command,
                    key,
                    coarse_deps=include_files(flags.include_dirs),
                    roots=(str(builder.source_dir().resolve()),),
                )
            )
    return jobs


def _portable(arg: str, include: Path) -> str:
    return arg.replace(str(include), "<torch-include>").replace(str(PACKAGE_ROOT), "<checkout>")


def cached(job: Job, env: Mapping[str, str]) -> Outcome | None:
    """The cached result of ``job`` while every file of the op's that it read is unchanged."""
    path = cache_dir(env) / f"{job.key}.json"
    try:
        data = json.loads(path.read_text())
        deps = data.pop("deps")
    except (OSError, ValueError, KeyError):
        return None
    # Valid while every file of the op's that the compile read is as it was.
    if not deps or own_deps(deps, job.roots) != deps:
        return None
    return Outcome(**{**data, "cached": True})


def run_job(job: Job, env: Mapping[str, str] = os.environ, use_cache: bool = True) -> Outcome:
    """Compile one source (or take its cached result)."""
    if use_cache:
        hit = cached(job, env)
        if hit is not None:
            return hit
    with tempfile.TemporaryDirectory(prefix="compat-") as tmp:
        obj = str(Path(tmp, "out.o"))
        depfile = Path(tmp, "out.d")
        command = [obj if arg == "{obj}" else arg for arg in job.command]
        if job.depfile:
            command += ["-MD", "-MF", str(depfile)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=PACKAGE_ROOT)
        seconds = round(time.perf_counter() - start, 1)
        read = parse_depfile(depfile.read_text()) if depfile.is_file() else []
    # A failed compile writes no list: its source and include dirs' files stand for it.
    deps = own_deps([job.source, *(read or job.coarse_deps)], job.roots)
    outcome = Outcome(
        job.torch, job.op, job.source, done.returncode == 0, seconds, job.key, _first_errors(done.stderr)
    )
    folder = cache_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    record = {**{k: v for k, v in asdict(outcome).items() if k != "cached"}, "deps": deps}
    staged = folder / f".{job.key}.tmp"
    staged.write_text(json.dumps(record))
    staged.replace(folder / f"{job.key}.json")
    return outcome


def _first_errors(stderr: str, keep: int = 12) -> str:
    """The compiler's first error lines: enough to see which API moved, short enough to commit."""
    lines = [line for line in stderr.splitlines() if "error" in line]
    return "\n".join(lines[:keep])[-3000:]


def run_jobs(
    jobs: Sequence[Job],
    env: Mapping[str, str] = os.environ,
    use_cache: bool = True,
    progress: Callable[[Outcome], None] | None = None,
    workers: int = 1,
) -> list[Outcome]:
    """Compile ``workers`` at a time (default one: the check runs beside other work, and a
    torch-including TU takes a core and ~1 GB); outcomes and progress in job order."""
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for outcome in pool.map(lambda job: run_job(job, env, use_cache), jobs):
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    return outcomes
