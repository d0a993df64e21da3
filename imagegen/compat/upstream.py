"""What upstream publishes and the catalog lacks: ``imagegen catalog --check-upstream``.

Three projects on the package index say it: ``torch`` (its releases, and the CUDA each one's
Linux wheel pins: ``cuda-toolkit==13.2.2`` from torch 2.11 on, ``nvidia-cuda-runtime-cu12==...``
before), ``nvidia-cuda-nvcc`` (NVIDIA's CUDA compiler wheels, one release per CUDA release from
13.0 on) and ``cuda-toolkit`` (the toolkit versions those make up: a target's full version and
its stand-ins' pin). ``findings`` compares them with the catalog and names what it lacks:

- ``torch-release``: a patch release of a known minor missing from the release list;
- ``torch-minor``: a minor no target admits;
- ``cuda-release``: a CUDA release without a target: one newer than the newest target, or
  one a torch release's wheel is built with (CUDA releases between targets that no torch is
  built with, such as 13.1, are not expected to have one);
- ``stale-default``: a target whose default torch is older than the newest release it admits
  (reported as held, not missing, where ``imagegen.imagespec.default_holds`` holds that default
  against that newest release, with its reason).

The check only reads: the catalog is data kept by a person, and where the two disagree the
table wins until that person updates it. It never says "current" about what it did not read: an
index without one of the three projects (a 404: a wrong path, a host without ``/simple``), one
that lists none of their releases, and a torch wheel whose CUDA pin is no version are
``IndexUnreachableError`` (exit 3) naming the project, as ``index_reader`` makes a malformed or
late answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from imagegen.compat import index_reader
from imagegen.compat.results import minor_of
from imagegen.errors import IndexUnreachableError
from imagegen.imagespec import catalog
from imagegen.imagespec.default_holds import DEFAULT_HOLDS
from imagegen.imagespec.torch_releases import TORCH_RELEASES
from imagegen.urls import redact

if TYPE_CHECKING:
    import requests

TORCH = "torch"
NVCC = "nvidia-cuda-nvcc"
TOOLKIT = "cuda-toolkit"
# Requirements whose pinned version is the CUDA release a torch wheel was built with: the
# toolkit metapackage (torch 2.11 on) and the runtime's wheel (CUDA 12: -cu12; 13: no suffix).
_CUDA_PINS = ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")


@dataclass(frozen=True)
class TorchRelease:
    version: str
    cuda: str | None  # the CUDA major.minor its Linux wheel pins; None: not read, or a CPU build


@dataclass(frozen=True)
class CudaRelease:
    minor: str  # "13.5"
    nvcc: str | None  # the newest nvidia-cuda-nvcc release of it: "13.5.37"
    toolkit: str | None  # the newest cuda-toolkit release of it: "13.5.0"


@dataclass(frozen=True)
class Upstream:
    index: str  # as shown: credentials redacted
    torch: tuple[TorchRelease, ...]  # oldest first
    cuda: tuple[CudaRelease, ...]  # oldest first


@dataclass(frozen=True)
class Finding:
    kind: str  # torch-release, torch-minor, cuda-release, stale-default
    subject: str  # "2.16", "13.6", "cuda13.0"
    message: str
    hint: str
    held: str | None = None  # a stale default the catalog holds on purpose: its reason


def pinned_cuda(requirements: Sequence[str]) -> str | None:
    """The CUDA major.minor a wheel's requirements pin (``cuda-toolkit[cublas]==13.2.2``: 13.2).

    ValueError naming the line where the pin is no version (``cuda-toolkit===foo``).
    """
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() not in _CUDA_PINS:
            continue
        pins = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
        if pins:
            try:
                return minor_of(pins[0].rstrip(".*"))
            except InvalidVersion:
                raise ValueError(f"Requires-Dist {line!r} pins {requirement.name} to no version") from None
    return None


def _newest_byminor_of(versions: Sequence[str]) -> dict[str, str]:
    newest: dict[str, str] = {}
    for version in sorted(versions, key=Version):
        newest[minor_of(version)] = version
    return newest


def _unread(projects: Sequence[index_reader.Project], oldest: Version) -> list[str]:
    """What of the three projects could not be read, in words ("no page for torch (HTTP 404)")."""
    said = []
    absent = [p.name for p in projects if not p.found]
    if absent:
        said.append(f"no page for {', '.join(absent)} (HTTP 404)")
    said.extend(f"no final release of {p.name}" for p in projects if p.found and not p.versions)
    torch = projects[0]
    if torch.versions and Version(torch.versions[-1]) < oldest:
        said.append(f"no torch release from {oldest} on (its newest is {torch.versions[-1]})")
    return said


def _pin(
    torch: index_reader.Project, version: str, index_url: str, http: requests.Session, deadline: float | None
) -> str | None:
    try:
        return pinned_cuda(index_reader.requirements(torch, version, index_url, http, deadline))
    except ValueError as exc:
        raise IndexUnreachableError(
            f"torch {version}'s Linux wheel on {redact(index_url)}: {exc}",
            hint="its metadata does not say which CUDA it is built with; ask whoever runs this "
            "index, or name another with --index-url",
        ) from None


def read(index_url: str, http: requests.Session, deadline: float | None = None) -> Upstream:
    """What the index publishes. Pins are read for the releases the catalog does not list and
    for the newest (one metadata read each; the catalog cites the known ones' CUDA). Each answer
    within ``deadline`` seconds (default ``index_reader.ANSWER_DEADLINE``).

    IndexUnreachableError (exit 3) naming each of the three projects it could not read: a
    report of "current" from an index that has none of them would be no check at all."""
    projects = [index_reader.read_project(n, index_url, http, deadline) for n in (TORCH, NVCC, TOOLKIT)]
    oldest = Version(TORCH_RELEASES[0])
    unread = _unread(projects, oldest)
    if unread:
        raise IndexUnreachableError(
            f"nothing to compare the catalog with: the package index {redact(index_url)} has "
            + "; ".join(unread),
            hint="--index-url must name the simple API's root, the URL pip takes as --index-url "
            "(e.g. https://HOST/simple), on an index that carries torch, nvidia-cuda-nvcc and "
            "cuda-toolkit",
        )
    torch, nvcc_project, toolkit_project = projects
    known = set(TORCH_RELEASES)
    versions = [v for v in torch.versions if Version(v) >= oldest]
    read_pins = {v for v in versions if v not in known} | set(versions[-1:])
    releases = tuple(
        TorchRelease(v, _pin(torch, v, index_url, http, deadline) if v in read_pins else None)
        for v in versions
    )
    nvcc = _newest_byminor_of(nvcc_project.versions)
    toolkit = _newest_byminor_of(toolkit_project.versions)
    minors = sorted(set(nvcc) | set(toolkit), key=Version)
    cuda = tuple(CudaRelease(m, nvcc.get(m), toolkit.get(m)) for m in minors)
    return Upstream(redact(index_url), releases, cuda)


def _admitted_by_any(minor: str) -> bool:
    return any(r.admits(minor) for t in catalog.all_targets() for r in t.torch)


def _torch_findings(upstream: Upstream) -> list[Finding]:
    found: list[Finding] = []
    known = set(TORCH_RELEASES)
    by_minor: dict[str, list[TorchRelease]] = {}
    for release in upstream.torch:
        by_minor.setdefault(minor_of(release.version), []).append(release)
    for minor, releases in by_minor.items():
        newest = releases[-1]
        if not _admitted_by_any(minor):
            pinned = next((r.cuda for r in reversed(releases) if r.cuda), None)
            built = f"; its Linux wheel on the index is a CUDA {pinned} build" if pinned else ""
            found.append(
                Finding(
                    "torch-minor",
                    minor,
                    f"torch {minor} is published ({newest.version}{built}) and no target admits it",
                    f"compile our ops against it now: make compat TORCH={minor}; then add "
                    f"{', '.join(r.version for r in releases)} to TORCH_RELEASES and {minor} to "
                    "TORCH_PYTHONS (imagegen/imagespec/torch_releases.py) and widen the ranges of "
                    "the targets it has builds for",
                )
            )
            continue
        missing = [r.version for r in releases if r.version not in known]
        if missing:
            found.append(
                Finding(
                    "torch-release",
                    ", ".join(missing),
                    f"torch {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} published and "
                    f"the catalog's release list lacks it: --torch {minor} still resolves to an older patch",
                    "add it to TORCH_RELEASES (imagegen/imagespec/torch_releases.py)",
                )
            )
    return found


def _cuda_findings(upstream: Upstream) -> list[Finding]:
    have = set(catalog.CUDA_TARGETS)
    newest_target = max((Version(v) for v in have), default=Version("0"))
    torch_cuda = {r.cuda: r.version for r in upstream.torch if r.cuda}
    found: list[Finding] = []
    releases = {c.minor: c for c in upstream.cuda}
    for minor in sorted(set(releases) | set(torch_cuda), key=Version):
        if minor in have:
            continue
        release = releases.get(minor, CudaRelease(minor, None, None))
        built_with = torch_cuda.get(minor)
        if Version(minor) <= newest_target and built_with is None:
            continue  # between targets, and no torch is built with it
        what = ", ".join(
            f"{name} {version}"
            for name, version in ((NVCC, release.nvcc), (TOOLKIT, release.toolkit))
            if version
        )
        why = f"torch {built_with}'s wheel is built with it" if built_with else "newer than every target"
        found.append(
            Finding(
                "cuda-release",
                minor,
                f"CUDA {minor} is published ({what or 'pinned by torch'}; {why}) and no target builds for it",
                f"add cuda{minor} to CUDA_TARGETS (imagegen/imagespec/catalog.py)"
                + (f" with full version {release.toolkit}" if release.toolkit else "")
                + f", then make image-cuda CUDA={minor}",
            )
        )
    return found


def _stale_defaults(upstream: Upstream) -> list[Finding]:
    published = [r.version for r in upstream.torch]
    found: list[Finding] = []
    for target in catalog.all_targets():
        said: set[tuple[str, str]] = set()
        for platform in target.platforms:
            admitted = [v for v in published if target.torch_range(v, platform) is not None]
            default = target.default_torch_for(platform)
            if not admitted or Version(admitted[-1]) <= Version(default) or (default, admitted[-1]) in said:
                continue  # current, or what another platform's finding already says
            said.add((default, admitted[-1]))
            where = "" if platform == catalog.DEFAULT_PLATFORM else f" on {platform}"
            hold = DEFAULT_HOLDS.get(target.name)
            holds = hold is not None and (hold.default, hold.newest) == (default, admitted[-1])
            found.append(
                Finding(
                    "stale-default",
                    target.name + where.replace(" on linux/", "-"),
                    f"{target.name}'s default torch{where} is {default}; "
                    f"the newest it admits is {admitted[-1]}",
                    "raise the default in imagegen/imagespec/catalog.py once an image of it is verified"
                    + (
                        ""
                        if hold is None or holds
                        else f" (its hold was decided at {hold.newest}: decide again)"
                    ),
                    hold.why if hold is not None and holds else None,
                )
            )
    return found


def findings(upstream: Upstream) -> list[Finding]:
    """What the catalog lacks against ``upstream``, torch first."""
    return [*_torch_findings(upstream), *_cuda_findings(upstream), *_stale_defaults(upstream)]


def report(upstream: Upstream, found: Sequence[Finding]) -> dict[str, Any]:
    """``imagegen catalog --check-upstream --json``."""
    missing = [f for f in found if f.held is None]
    return {
        "index": upstream.index,
        "ok": not missing,
        "missing": [asdict(f) for f in missing],
        "held": [asdict(f) for f in found if f.held is not None],
        "upstream": {
            "torch": [asdict(r) for r in upstream.torch],
            "cuda": [asdict(c) for c in upstream.cuda],
        },
    }
