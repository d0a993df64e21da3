"""The whole check: host code per torch minor, device code per toolkit, results written.

``check`` is what ``scripts/compat.py`` (``make compat``) calls. The torch minors are every one
a catalog target admits (the CPU ops for all of them, the GPU ops' bindings for those a GPU
target admits), each at its newest patch release. ``torch_selection`` adds a torch the catalog
does not know yet (``make compat TORCH=2.16``), resolved on the package index: both the CPU ops
and the GPU bindings compile against it, since a new torch breaks either as readily. Results
are written after every minor, so a long run shows its progress in the file and an interrupted
one keeps what it found.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from imagegen.compat import device, headers, host, index_reader, pch, results
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.urls import redact
from op_builder.builder import OpBuilder
from op_builder.context import cxx_standard
from op_builder.plan import probe_host
from op_builder.registry import ALL_OPS
from op_builder.toolchain import Toolchain

# The device compilers a complete run wants, and how each is had (for "not available here").
WANTED_TOOLKITS: tuple[tuple[str, str, str], ...] = (
    ("cuda", "12.4", "its stand-in image: imagegen standins --cuda 12.4, from Debian trixie's toolkit"),
    ("cuda", "13.0", "this machine's CUDA toolkit"),
    *(
        ("cuda", v, f"its stand-in image: imagegen standins --cuda {v}, from NVIDIA's wheels")
        for v in device.STANDIN_CUDA_VERSIONS
        if v.startswith("13.")
    ),
    ("rocm", "5.2", "Debian's hipcc: scripts/system-deps.sh --rocm"),
    ("rocm", "5.7", "Debian trixie's hipcc in an image: scripts/compat-hip-image.sh"),
)


@dataclass(frozen=True)
class Selection:
    """What one run compiles."""

    cpu_minors: tuple[str, ...]
    gpu_minors: tuple[str, ...]
    device: bool = True
    # minor -> release for the minors no catalog target admits, as the index publishes them;
    # the catalog's own minors resolve through the catalog (``release_of``).
    releases: Mapping[str, str] = field(default_factory=dict, hash=False)

    def release_of(self, minor: str) -> str:
        return release_of(minor, self.releases)

    def order(self) -> list[str]:
        """Every minor once: the oldest and the newest first (the range's ends say most about
        API moves), then the rest from the newest down."""
        minors = sorted({*self.cpu_minors, *self.gpu_minors}, key=Version)
        if len(minors) <= 2:
            return minors
        return [minors[0], minors[-1], *reversed(minors[1:-1])]


def full_selection() -> Selection:
    """Every torch minor any target admits; the GPU bindings for those a GPU target admits."""

    def minors(targets: Sequence[catalog.Target]) -> tuple[str, ...]:
        found = {m for t in targets for m in results.admitted_minors(t)}
        return tuple(sorted(found, key=Version))

    gpu = [t for t in catalog.all_targets() if t.accelerator != "cpu"]
    return Selection(minors(catalog.all_targets()), minors(gpu))


def sample_selection() -> Selection:
    """CI's cheap sample: the CPU ops against the oldest and newest torch the CPU target admits."""
    admitted = results.admitted_minors(catalog.CPU_TARGET)
    return Selection((admitted[0], admitted[-1]), (), device=False)


def release_of(minor: str, releases: Mapping[str, str] | None = None) -> str:
    """``minor``'s release: the one resolved on the index for a minor outside the catalog
    (``releases``), else the catalog's newest."""
    if releases and minor in releases:
        return releases[minor]
    release = catalog.resolve_torch_release(minor)
    if release is None:  # every admitted minor has a release: the catalog's own lists say so
        raise ValueError(f"torch {minor}: no release in the catalog")
    return release


def _requested(text: str) -> Version:
    """``--torch``'s ``X.Y`` or ``X.Y.Z``, a final release (headers of a pre-release prove nothing
    about the release that follows it)."""
    version = index_reader.final_release(text)
    if version is None or len(version.release) not in (2, 3) or version.epoch:
        raise BadInputError(f"--torch {text}: not a final torch release (X.Y or X.Y.Z)")
    return version


def resolve_named(wanted: Version, published: Sequence[str]) -> str | None:
    """``X.Y``: the newest ``X.Y.*`` in ``published`` (final releases); ``X.Y.Z``: itself when
    published; None otherwise."""
    versions = [Version(p) for p in published]
    if len(wanted.release) == 2:
        same = [v for v in versions if v.release[:2] == wanted.release]
        return str(max(same)) if same else None
    return str(wanted) if wanted in versions else None


def torch_selection(
    names: Sequence[str], index_url: str, device: bool = False, env: Mapping[str, str] = os.environ
) -> Selection:
    """``--torch``'s selection. A minor the catalog admits runs as the full run has it (GPU
    bindings where a GPU target admits it), at the catalog's release; any other final release
    is looked up on the index (read only then) and gets the CPU ops and the GPU bindings both.

    Raises ``BadInputError`` (exit 2) for a malformed or unpublished version and
    ``IndexUnreachableError`` (exit 3) when the index cannot be read.
    """
    full = full_selection()
    admitted: list[str] = []
    outside: dict[str, Version] = {}
    for text in names:
        wanted = _requested(text)
        minor = f"{wanted.major}.{wanted.minor}"
        if minor in full.cpu_minors:
            # The catalog's proof of a minor is its newest release: another patch would stand
            # in the results for a release no image uses.
            if len(wanted.release) == 3 and str(wanted) != release_of(minor):
                raise BadInputError(
                    f"--torch {text}: the catalog admits torch {minor}, checked at {release_of(minor)}",
                    hint=f"name {minor}",
                )
            admitted.append(minor)
        elif outside.setdefault(minor, wanted).release != wanted.release:  # 2.16 == 2.16.0 as Versions
            raise BadInputError(f"--torch names torch {minor} twice: {outside[minor]} and {wanted}")
    releases: dict[str, str] = {}
    if outside:
        published = index_reader.read_project("torch", index_url, headers.session(env)).versions
        missing = []
        for minor, wanted in outside.items():
            release = resolve_named(wanted, published)
            if release is None:
                missing.append(str(wanted))
            else:
                releases[minor] = release
        if missing:
            raise BadInputError(
                f"torch {', '.join(missing)}: no such final release on the package index {redact(index_url)}",
                hint=f"its newest torch is {published[-1]}" if published else "it lists no torch at all",
            )
    cpu = tuple(dict.fromkeys([*admitted, *releases]))
    gpu = tuple(m for m in cpu if m in full.gpu_minors or m in releases)
    return Selection(cpu, gpu, device=device, releases=releases)


def compiler_version(compiler: str = "g++") -> str:
    done = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    first = done.stdout.splitlines()[0] if done.stdout else compiler
    return first


def _print(line: str) -> None:
    print(line, flush=True)


def _outcome_json(outcome: host.Outcome, targets: Mapping[str, str]) -> dict[str, Any]:
    return {
        "op": outcome.op,
        "target": targets[outcome.op],
        "source": outcome.source,
        "ok": outcome.ok,
        "seconds": outcome.seconds,
        "key": outcome.key,
        "error": outcome.output,
    }


def _progress(say: Callable[[str], None]) -> Callable[[host.Outcome], None]:
    def report(outcome: host.Outcome) -> None:
        status = "OK  " if outcome.ok else "FAIL"
        how = "cached" if outcome.cached else f"{outcome.seconds:.1f}s"
        say(f"{status} {outcome.torch:<16} {outcome.source:<48} {how}")
        if not outcome.ok:
            say("     " + outcome.output.replace("\n", "\n     "))

    return report


@dataclass
class Run:
    """One run's state: the results document it updates and where it writes it."""

    data: dict[str, Any]
    path: Path | None  # None: a sample, written nowhere
    say: Callable[[str], None] = _print
    failures: list[str] = field(default_factory=list)

    def save(self) -> None:
        if self.path is None:
            return
        # The images section is kept by hand, possibly while a long run goes on: take the file's.
        self.data["images"] = results.load(self.path).get("images", self.data.get("images", []))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staged = self.path.with_suffix(".tmp")
        staged.write_text(results.dump(self.data))
        staged.replace(self.path)


def check_host(
    run: Run,
    selection: Selection,
    ops: Mapping[str, OpBuilder],
    toolchain: Toolchain,
    index_url: str,
    env: Mapping[str, str],
    use_cache: bool,
    workers: int = 1,
) -> None:
    cuda_include = device_cuda_include(toolchain)
    if selection.gpu_minors and cuda_include is None:
        run.say("SKIP GPU bindings: no CUDA toolkit headers here (torch's c10/cuda includes them)")
    targets = {name: b.target for name, b in ops.items()}
    host_data: dict[str, Any] = run.data.setdefault("host", {})
    for minor in selection.order():
        release = selection.release_of(minor)
        start = time.perf_counter()
        include = headers.fetch_headers(release, index_url, env)
        wanted = {n: b for n, b in ops.items() if b.target == "cpu" or minor in selection.gpu_minors}
        jobs = host.jobs_for(release, include, wanted, toolchain, cuda_include)
        run.say(f"torch {release}: {len(jobs)} sources ({cxx_standard(release)})")
        precompiled = pch.Precompiled()
        try:
            todo = [not use_cache or host.cached(j, env) is None for j in jobs]
            use_pch = [t and w for t, w in zip(todo, pch.wants_pch(jobs))]
            jobs = precompiled.apply(jobs, use_pch, workers)
            outcomes = host.run_jobs(jobs, env, use_cache, _progress(run.say), workers)
        finally:
            precompiled.close()
        run.failures += [f"torch {release}: {o.source}" for o in outcomes if not o.ok]
        host_data[minor] = {
            "torch": release,
            "wheel": headers.wheel_of(release, env) or "-",
            "std": cxx_standard(release),
            "seconds": round(time.perf_counter() - start, 1),
            "sources": [_outcome_json(o, targets) for o in outcomes],
        }
        run.data["host"] = dict(sorted(host_data.items(), key=lambda kv: Version(kv[0])))
        run.save()


def device_cuda_include(toolchain: Toolchain) -> Path | None:
    homes = [Path(toolchain.cuda.home)] if toolchain.cuda else []
    homes.append(Path("/usr/local/cuda"))
    for home in homes:
        if (home / "include" / "cuda_runtime_api.h").is_file():
            return home / "include"
    return None


def stds_for(minors: Sequence[str], releases: Mapping[str, str] | None = None) -> list[str]:
    """The C++ standards torch asks for across ``minors`` (C++17 when there are none)."""
    stds = {cxx_standard(release_of(m, releases)) for m in minors}
    return sorted(stds) or ["c++17"]


def _targets_minors(
    accelerator: str, version: str, toolkits: Sequence[device.Toolkit], outside: Sequence[str] = ()
) -> list[str]:
    """Minors of the targets this toolkit proves: those of its accelerator for which it is the
    nearest. The minors ``outside`` the catalog go to the accelerator's newest toolkit here: a
    new torch is paired with the newest toolkits, and an old nvcc failing under the standard
    it asks for would only take away the proof of the targets that toolkit stands for."""
    same = [t for t in toolkits if t.accelerator == accelerator]
    newest = max((Version(t.version) for t in same), default=None)
    minors: list[str] = list(outside) if newest is not None and Version(version) == newest else []
    for target in catalog.all_targets():
        if target.accelerator != accelerator:
            continue
        nearest = min(same, key=lambda t: results.toolkit_distance(t.version, target.version))
        if nearest.version == version:
            minors += results.admitted_minors(target)
    return minors


def check_device(
    run: Run,
    ops: Mapping[str, OpBuilder],
    toolchain: Toolchain,
    env: Mapping[str, str],
    use_cache: bool,
    workers: int = 1,
    releases: Mapping[str, str] | None = None,
) -> None:
    """Every toolkit's device code; ``releases``: the minors outside the catalog a run names."""
    toolkits = device.find_toolkits(toolchain)
    runs: list[dict[str, Any]] = []
    for toolkit in toolkits:
        minors = _targets_minors(toolkit.accelerator, toolkit.version, toolkits, tuple(releases or ()))
        # A toolkit nearest to no target still runs once, under C++17.
        for std in stds_for(minors, releases):
            jobs = device.jobs_for(toolkit, std, ops, toolchain)
            run.say(f"{toolkit.label} ({toolkit.where}), {std}: {len(jobs)} sources")
            outcomes = host.run_jobs(jobs, env, use_cache, _progress(run.say), workers)
            run.failures += [f"{toolkit.label} {std}: {o.source}" for o in outcomes if not o.ok]
            runs.append(
                {
                    "label": toolkit.label,
                    "accelerator": toolkit.accelerator,
                    "version": toolkit.version,
                    "where": toolkit.where,
                    "std": std,
                    "sources": [
                        {
                            "op": o.op,
                            "source": o.source,
                            "ok": o.ok,
                            "seconds": o.seconds,
                            "key": o.key,
                            "error": o.output,
                        }
                        for o in outcomes
                    ],
                }
            )
            run.data["device"] = runs
            run.save()
    missing = device.missing_toolkits(toolkits, WANTED_TOOLKITS)
    run.data["device"] = runs
    run.data["unavailable"] = [
        {"accelerator": m.accelerator, "version": m.version, "reason": m.reason} for m in missing
    ]
    for m in missing:
        run.say(f"SKIP {m.accelerator} {m.version}: {m.reason}")
    run.save()


def check(
    selection: Selection,
    index_url: str,
    results_path: Path | None,
    env: Mapping[str, str] = os.environ,
    use_cache: bool = True,
    say: Callable[[str], None] = _print,
    workers: int = 1,
) -> Run:
    """Compile what ``selection`` names; update and write the results (unless a sample)."""
    toolchain = probe_host(env)
    previous = results.load(results_path) if results_path is not None else {}
    data: dict[str, Any] = {
        "schema": results.SCHEMA,
        "checked": time.strftime("%Y-%m-%d", time.gmtime()),
        "compiler": compiler_version(),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        # A partial run (some minors) keeps the others' earlier results.
        "host": dict(previous.get("host", {})),
        "device": previous.get("device", []),
        "unavailable": previous.get("unavailable", []),
        "images": previous.get("images", []),
    }
    run = Run(data, results_path, say)
    check_host(run, selection, ALL_OPS, toolchain, index_url, env, use_cache, workers)
    if selection.device:
        check_device(run, ALL_OPS, toolchain, env, use_cache, workers, selection.releases)
    return run
