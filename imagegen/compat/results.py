"""The compatibility results: what was compiled, built and verified here, and their tables.

One JSON file ships with the package (``imagegen/data/compat.json``). ``make compat`` writes its
``host``, ``device`` and ``unavailable`` sections; the ``images`` section is kept by hand, one
entry per image of a catalog target built (and verified) here, with the benchmark section that
records it as evidence, and the check carries it over untouched. ``imagegen catalog`` reads the
file for each target's proof; ``docs/compat.md`` is rendered from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import Version

from imagegen.imagespec import catalog
from op_builder.context import cxx_standard

RESULTS_FILE = Path(__file__).resolve().parent.parent / "data" / "compat.json"
SCHEMA = 1


def load(path: Path | None = None) -> dict[str, Any]:
    """The results (an empty document when the file is absent: nothing is proven)."""
    if path is None:
        text = resources.files("imagegen").joinpath("data", "compat.json")
        if not text.is_file():
            return {"schema": SCHEMA}
        data = json.loads(text.read_text())
    elif path.is_file():
        data = json.loads(path.read_text())
    else:
        return {"schema": SCHEMA}
    return data if isinstance(data, dict) else {"schema": SCHEMA}


def dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def minor_of(torch: str) -> str:
    v = Version(torch)
    return f"{v.major}.{v.minor}"


def admitted_minors(target: catalog.Target) -> list[str]:
    return list(dict.fromkeys(minor_of(t) for t in target.torch_versions()))


def _host_ok(entry: Mapping[str, Any], gpu: bool) -> bool:
    sources = entry.get("sources", [])
    cpu = [s for s in sources if s.get("target") == "cpu"]
    wanted = [s for s in sources if gpu or s.get("target") == "cpu"]
    if not cpu or (gpu and not any(s.get("target") == "gpu" for s in sources)):
        return False
    return all(s.get("ok") for s in wanted)


def toolkit_distance(have: str, wanted: str | None) -> tuple[bool, int, str]:
    """How far a toolkit release is from a target's: the same major first, then the nearest."""
    a, b = Version(have), Version(wanted or "0")
    # As one number, minor in the low digits: ROCm 5.7 is nearer to 6.1 than 5.2 is.
    return (a.major != b.major, abs((a.major - b.major) * 100 + a.minor - b.minor), have)


@dataclass(frozen=True)
class DeviceProof:
    toolkit: str  # "nvcc 13.0"
    exact: bool  # the target's own major.minor
    stds: tuple[str, ...]  # the C++ standards it compiled under


def device_proof(target: catalog.Target, data: Mapping[str, Any]) -> DeviceProof | None:
    """The toolkit that compiled the device code for ``target``: its own release, else the nearest."""
    if target.accelerator == "cpu":
        return None
    ok: dict[tuple[str, str], list[str]] = {}
    for run in data.get("device", []):
        if run.get("accelerator") != target.accelerator or not run.get("sources"):
            continue
        if all(s.get("ok") for s in run["sources"]):
            ok.setdefault((str(run["label"]), str(run["version"])), []).append(str(run["std"]))
    if not ok:
        return None
    (label, version), stds = min(ok.items(), key=lambda item: toolkit_distance(item[0][1], target.version))
    return DeviceProof(label, version == target.version, tuple(sorted(stds)))


def compiled_minors(target: catalog.Target, data: Mapping[str, Any]) -> list[str]:
    """The admitted torch minors whose host code compiled (and device code, for a GPU target)."""
    host = data.get("host", {})
    gpu = target.accelerator != "cpu"
    proof = device_proof(target, data) if gpu else None
    minors: list[str] = []
    for minor in admitted_minors(target):
        entry = host.get(minor)
        if entry is None or not _host_ok(entry, gpu):
            continue
        if gpu and (proof is None or cxx_standard(entry.get("torch")) not in proof.stds):
            continue
        minors.append(minor)
    return minors


def image_records(target: catalog.Target, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(i) for i in data.get("images", []) if i.get("target") == target.name]


def proof(target: catalog.Target, data: Mapping[str, Any]) -> dict[str, Any]:
    """``target``'s proof as ``imagegen catalog --json`` shows it."""
    images = image_records(target, data)
    device = device_proof(target, data)
    compiled = compiled_minors(target, data)
    return {
        "compiled": compiled,
        "not_compiled": [m for m in admitted_minors(target) if m not in compiled],
        "device": None
        if device is None
        else {"toolkit": device.toolkit, "exact": device.exact, "std": list(device.stds)},
        "built": any(i.get("built") for i in images),
        "verified": any(i.get("verified") for i in images),
        # Which platforms' images: an arm64 image is proven apart from the amd64 one.
        "built_platforms": _platforms(images, "built"),
        "verified_platforms": _platforms(images, "verified"),
        "images": images,
    }


def _platforms(images: Iterable[Mapping[str, Any]], what: str) -> list[str]:
    """The platforms with an image that was ``what`` (built, verified), in the catalog's order."""
    found = {str(i.get("platform") or catalog.DEFAULT_PLATFORM) for i in images if i.get(what)}
    return [p for p in catalog.PLATFORMS if p in found]


# ---------------------------------------------------------------- docs/compat.md


def _cell(sources: Iterable[Mapping[str, Any]]) -> str:
    items = list(sources)
    if not items:
        return "not checked"
    failed = [s for s in items if not s.get("ok")]
    if not failed:
        return f"{len(items)}/{len(items)} ok"
    names = ", ".join(f"`{Path(str(s['source'])).name}`" for s in failed)
    return f"**{len(items) - len(failed)}/{len(items)}**: {names} failed"


def markdown(data: Mapping[str, Any]) -> str:
    """docs/compat.md: the tables of the results (a test keeps the file equal to this)."""
    host = data.get("host", {})
    all_targets = catalog.all_targets()
    lines = [
        "# Compatibility: what was compiled, built and verified here",
        "",
        "Generated by `make compat` (`scripts/compat.py`) from `imagegen/data/compat.json`; do not edit.",
        f"Host compiler: {data.get('compiler', '-')}; Python headers {data.get('python', '-')}; "
        f"checked {data.get('checked', '-')}.",
        "",
        "`make compat` compiles every op against every torch minor the catalog admits (at its newest",
        "patch release) and every device compiler it can have here. torch's headers come out of each",
        "release's wheel on the package index pip uses (only the zip's directory and `torch/include`",
        "are read, with HTTP ranges; cached in `~/.cache/imagegen/torch-headers`). Each compile's",
        "result is cached with the digests of the files it read, so a re-run compiles only what an",
        "edit reached (`scripts/compat.py --no-cache` compiles all). Sources that include",
        "`torch/extension.h` get it precompiled once per release and flag set (GCC uses it only where",
        "the flags match): it changes the cost, not the answer. CI compiles a sample afresh: the",
        "CPU ops against the oldest and newest torch (`scripts/compat.py --sample`). A toolkit that",
        "cannot be had here is listed as such, and proves nothing. `imagegen catalog` shows the same",
        "proof per target. The images section of the results is kept by hand: one entry per image",
        "of a catalog target built (and verified) here, pointing at the",
        "[benchmark](benchmarks.md) that records it.",
        "",
        "## Host code per torch minor",
        "",
        "Every CPU op's sources and every GPU op's bindings, compiled (`-c -O0`) with the flags",
        "`op_builder` gives them for that torch release, against the headers of its CPython 3.11",
        "x86-64 wheel on the package index. A row no target admits is a torch the catalog does not",
        "know yet, compiled with `make compat TORCH=X.Y` (its newest release on the index) before it",
        "goes into the catalog.",
        "",
        "| torch | wheel | C++ | CPU ops | GPU bindings | targets that admit it |",
        "|---|---|---|---|---|---|",
    ]
    for minor in sorted(host, key=Version):
        entry = host[minor]
        sources = entry.get("sources", [])
        admits = [t.name for t in all_targets if minor in admitted_minors(t)]
        lines.append(
            f"| {entry.get('torch', minor)} | `{entry.get('wheel', '-')}` | {entry.get('std', '-')} "
            f"| {_cell(s for s in sources if s.get('target') == 'cpu')} "
            f"| {_cell(s for s in sources if s.get('target') == 'gpu')} | {', '.join(admits) or '-'} |"
        )
    lines += [
        "",
        "## Device code per toolkit",
        "",
        "Every GPU op's `.cu` sources, compiled with the device flags `op_builder` gives them for",
        "that toolkit (CUDA archs 8.0;9.0, HIP gfx90a;gfx1030) under each C++ standard torch asks for.",
        "",
        "| toolkit | where | C++ | sources |",
        "|---|---|---|---|",
    ]
    for run in data.get("device", []):
        lines.append(f"| {run['label']} | {run['where']} | {run['std']} | {_cell(run.get('sources', []))} |")
    for missing in data.get("unavailable", []):
        name = "nvcc" if missing["accelerator"] == "cuda" else "hipcc"
        lines.append(f"| {name} {missing['version']} | {missing['reason']} | - | - |")
    lines += [
        "",
        "## Per catalog target",
        "",
        "compiled: the admitted torch minors whose host code compiled, and whose device code compiled",
        "with the toolkit named (the target's own release where one can be had here, else the nearest).",
        "built / verified: an image of the target built / verified here (the `images` section of the",
        "results, kept by hand with the benchmark that recorded it).",
        "",
        "| target | torch admitted | compiled | device code | built | verified |",
        "|---|---|---|---|---|---|",
    ]
    for target in all_targets:
        p = proof(target, data)
        admitted = admitted_minors(target)
        compiled = p["compiled"]
        span = f"{compiled[0]}–{compiled[-1]}" if compiled == admitted and compiled else ", ".join(compiled)
        if p["not_compiled"]:
            span = (span + "; " if span else "") + "not: " + ", ".join(p["not_compiled"])
        device = p["device"]
        device_text = "-" if target.accelerator == "cpu" else "none available here"
        if device is not None:
            device_text = device["toolkit"] + ("" if device["exact"] else " (nearest here)")
        built = ", ".join(f"{i['torch']} ({i['date']})" for i in p["images"] if i.get("built")) or "no"
        verified = "yes" if p["verified"] else "no"
        lines.append(
            f"| `{target.name}` | {admitted[0]}–{admitted[-1]} | {span or 'none'} | {device_text} "
            f"| {built} | {verified} |"
        )
    lines += [
        "",
        "## Images built here",
        "",
        "| target | platform | torch | date | built | verified | evidence |",
        "|---|---|---|---|---|---|---|",
    ]
    for image in data.get("images", []):
        evidence = str(image.get("evidence", "-"))
        link = f"[{evidence.split('#')[0]}]({evidence.removeprefix('docs/')})" if evidence != "-" else "-"
        built, verified = ("yes" if image.get(k) else "no" for k in ("built", "verified"))
        lines.append(
            f"| `{image['target']}` | {image.get('platform', '-')} | {image['torch']} | {image['date']} "
            f"| {built} | {verified} | {link} |"
        )
    return "\n".join(lines) + "\n"
