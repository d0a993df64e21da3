"""How large an image is, and what makes it so: its bytes by part, and a size budget.

The parts: the runtime ``base`` (the base image's own size, when it is here and its layers are
the image's first), ``torch`` (the torch distribution: its package, its libraries, torchgen,
functorch, its dist-info), ``cuda`` (the ``nvidia-*`` wheels of CUDA's runtime libraries),
``python`` (every other distribution, the venv's own files, op packages on ``sys.path``), one
``op`` part per compiled op module (GPU modules split by device-code entry: ``sm_90``,
``compute_90``, ``gfx90a``) and ``other``: the image's total, as the engine counts it, less all
of these (the system packages the runtime stage adds, python where the base had none, the
base itself when it is not here). Everything but the base and the total is measured inside the
image by ``size_probe``, run in the sealed container the verifier uses.

``attribute`` is the pure part (probe document + engine figures -> ``SizeReport``), tested on
listings; ``measure_image`` asks the engine and the image.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from imagegen.engine.images import find_image, inspect_local
from imagegen.engine.layer_dirs import layer_dirs
from imagegen.engine.sealed import SealedRun
from imagegen.errors import BadInputError, BuildFailedError, VerificationFailedError
from imagegen.imagespec.reference import check_reference, reference_problem
from imagegen.proof import size_probe
from imagegen.proof.layer_sizes import LayerSize, layer_sizes
from imagegen.proof.outside import read_layers
from imagegen.verify.container import run_python

KINDS = ("base", "torch", "python", "cuda", "op", "other")
TARGET_LABEL = "io.imagegen.target"
CUDA_LABEL = "io.imagegen.cuda"
BASE_LABEL = "org.opencontainers.image.base.name"
TORCH_DIST = "torch"
CUDA_PREFIX = "nvidia-"  # NVIDIA's runtime wheels: nvidia-cublas, nvidia-cudnn-cu12, ...
# Device code is said to dominate a module when it is more than this share of its bytes.
DOMINANT_SHARE = 0.5

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "t": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")
_SIZE_HINT = (
    "a size such as 2GiB, 1.5GB, 500MiB or a number of bytes (KiB/MiB/GiB: powers of 1024, kB/MB/GB: of 1000)"
)


def parse_size(text: str, option: str = "--max-size") -> int:
    """Bytes from ``2GiB``, ``1.5GB``, ``500MiB``, ``2G`` (as Docker reads it: GiB) or ``1048576``.

    Case does not matter; a size must be at least one byte. Bad input raises BadInputError.
    """
    match = _SIZE.fullmatch(text)
    unit = _UNITS.get(match[2].lower()) if match else None
    if match is None or unit is None:
        raise BadInputError(f"{option} {text!r} is not a size", hint=_SIZE_HINT)
    try:
        value = int(Decimal(match[1]) * unit)
    except InvalidOperation as exc:  # the pattern admits only decimals; kept for the type checker
        raise BadInputError(f"{option} {text!r} is not a size", hint=_SIZE_HINT) from exc
    if value < 1:
        raise BadInputError(f"{option} {text!r} is less than one byte", hint=_SIZE_HINT)
    return value


def format_bytes(size: int) -> str:
    """``1.23 GiB``, ``456.7 MiB``, ``12.0 KiB``, ``512 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(size) >= scale:
            return f"{size / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{size} B"


def arch_key(name: str) -> tuple[int, int, str]:
    """Device-code entries in arch order, SASS before the PTX of the same arch: sm_80, sm_90,
    compute_90, sm_100; names without a number last."""
    number = re.search(r"\d+", name)
    return (int(number[0]) if number else 1 << 30, 1 if name.startswith("compute_") else 0, name)


@dataclass(frozen=True)
class SizePart:
    """One part of an image. ``archs``: an op module's bytes per device-code entry (the rest of
    the module is host code); ``packages``: a ``python`` or ``cuda`` part's bytes per distribution."""

    name: str
    kind: str
    bytes: int
    archs: Mapping[str, int] = field(default_factory=dict)
    packages: Mapping[str, int] = field(default_factory=dict)
    file: str | None = None
    image: str | None = None  # the base part: the base image it is

    @property
    def device_bytes(self) -> int:
        return sum(self.archs.values())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "kind": self.kind, "bytes": self.bytes}
        if self.kind == "op":
            data["file"] = self.file
            data["archs"] = dict(self.archs)
            data["host_bytes"] = self.bytes - self.device_bytes
        if self.packages:
            data["packages"] = dict(self.packages)
        if self.image is not None:
            data["image"] = self.image
        return data


@dataclass(frozen=True)
class SizeReport:
    """An image's bytes by part; the parts sum to ``total_bytes``."""

    image: str
    total_bytes: int
    parts: tuple[SizePart, ...]
    base: str | None = None  # the runtime base image the labels name
    cuda: str | None = None  # the toolkit the ops were built with (io.imagegen.cuda)
    notes: tuple[str, ...] = ()
    layers: tuple[LayerSize, ...] = ()  # bottom first: what each holds, and costs a node with those below

    def by_kind(self, kind: str) -> tuple[SizePart, ...]:
        return tuple(part for part in self.parts if part.kind == kind)

    def advice(self) -> tuple[str, ...]:
        """Where a GPU op's device code dominates its module: say so, and what would cut it."""
        lines = [line for part in self.by_kind("op") for line in _op_advice(part)]
        dominated = [part for part in self.by_kind("op") if _op_advice(part)]
        return tuple(lines + _cuts(dominated, self.cuda)) if lines else ()

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "total_bytes": self.total_bytes,
            "base": self.base,
            "parts": [part.to_json() for part in self.parts],
            "advice": list(self.advice()),
            "notes": list(self.notes),
            "layers": [layer.to_json() for layer in self.layers],
        }

    def lines(self) -> list[str]:
        """The attribution as text: one line per part (base, torch, python, cuda, the ops, other),
        the total, then the notes and the advice."""
        rows = [("part", "kind", "size", "share", "detail")]
        for part in self.parts:
            share = f"{100 * part.bytes / self.total_bytes:.1f}%" if self.total_bytes else "-"
            rows.append((part.name, part.kind, format_bytes(part.bytes), share, _detail(part)))
        rows.append(("total", "", format_bytes(self.total_bytes), "100%", self.image))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        text = [
            "  ".join(
                [
                    row[0].ljust(widths[0]),
                    row[1].ljust(widths[1]),
                    *(c.rjust(w) for c, w in zip(row[2:4], widths[2:4])),
                    row[4],
                ]
            ).rstrip()
            for row in rows
        ]
        return text + self._layer_lines() + [f"note: {note}" for note in self.notes] + list(self.advice())

    def _layer_lines(self) -> list[str]:
        """Each layer, bottom first, and what a node that holds the layers below it pulls for it."""
        if not self.layers:
            return []
        rows = [("layer", "holds", "size", "digest")]
        rows += [
            (str(n), layer.holds, format_bytes(layer.bytes), layer.diff_id[:19])
            for n, layer in enumerate(self.layers, 1)
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [
            f"{r[0].rjust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].rjust(widths[2])}  {r[3]}" for r in rows
        ]
        return ["", "each layer, bottom first: a node holding the layers below one pulls its size", *lines]


def _detail(part: SizePart) -> str:
    if part.image is not None:
        return part.image
    if part.archs:
        names = sorted(part.archs, key=arch_key)
        entries = ", ".join(f"{name} {format_bytes(part.archs[name])}" for name in names)
        return f"{entries}; host {format_bytes(part.bytes - part.device_bytes)}"
    if part.packages:
        largest = sorted(part.packages.items(), key=lambda item: -item[1])
        shown = ", ".join(f"{name} {format_bytes(size)}" for name, size in largest[:4])
        return shown + (f", {len(largest) - 4} more" if len(largest) > 4 else "")
    return ""


def _op_advice(part: SizePart) -> list[str]:
    """One line for an op whose device code dominates its module; none for any other op."""
    device = part.device_bytes
    if not part.archs or device <= DOMINANT_SHARE * part.bytes:
        return []
    targets = [n for n in part.archs if n.startswith(("sm_", "gfx"))]
    each = f"; about {format_bytes(device // len(targets))} per arch" if targets else ""
    return [
        f"{part.name}: device code is {format_bytes(device)} of its {format_bytes(part.bytes)} "
        f"({100 * device / part.bytes:.0f}%), {len(part.archs)} entries{each}"
    ]


def _cuts(ops: Sequence[SizePart], cuda: str | None) -> list[str]:
    """What would cut the device code of ``ops`` (those whose device code dominates)."""
    names = {name for part in ops for name in part.archs}
    cuts = ["  fewer archs: --arch with only the GPUs the image runs on (each arch is one entry per op)"]
    ptx = sorted((n for n in names if n.startswith("compute_")), key=arch_key)
    if len(ptx) > 1:
        cuts.append(f"  PTX only for the newest arch: +PTX on {ptx[-1].replace('compute_', 'sm_')} alone")
    if any(n.startswith(("sm_", "compute_")) for n in names):
        cuts.append(f"  -compress-mode=size: {_compress_note(cuda)} (measured: docs/benchmarks.md)")
    return ["to cut it:", *cuts]


def _compress_note(cuda: str | None) -> str:
    """What ``-compress-mode=size`` takes: nvcc 12.8 or newer, and a driver that reads such fatbins
    (rapids-cmake's ``rapids_cuda_enable_fatbin_compression`` documents 550.54.14 for CUDA 12
    toolkits, 580 for CUDA 13, the driver CUDA 13 needs anyway)."""
    try:
        major, minor = (int(x) for x in (cuda or "").split(".")[:2])
    except ValueError:
        return "needs nvcc 12.8 or newer, and a driver of 550.54.14 (CUDA 12) or 580 (CUDA 13) or newer"
    if (major, minor) < (12, 8):
        return f"not in this image's nvcc ({cuda}); nvcc 12.8 or newer has it"
    if major >= 13:
        return f"nvcc {cuda} has it, and CUDA 13's drivers (580 or newer) read it"
    return f"nvcc {cuda} has it; the driver must be 550.54.14 or newer to read it"


# --------------------------------------------------------------------------- attribution


def attribute(
    image: str,
    total_bytes: int,
    probe: Mapping[str, Any],
    base: str | None = None,
    base_bytes: int | None = None,
    cuda: str | None = None,
) -> SizeReport:
    """The image's parts from the probe's document (``size_probe``) and the engine's figures.

    ``base_bytes`` None: the base is not here (or not the image's first layers); its bytes are
    then part of ``other``, and a note says so. Pure.
    """
    notes: list[str] = []
    parts: list[SizePart] = []
    if base_bytes is not None:
        parts.append(SizePart("base", "base", base_bytes, image=base))
    elif base:
        notes.append(
            f"the runtime base {base} is not here (or not this image's first layers): its bytes are in other"
        )
    dists: Mapping[str, int] = probe.get("dists") or {}
    torch = dists.get(TORCH_DIST, 0)
    if torch:
        parts.append(SizePart("torch", "torch", torch))
    python = {
        name: size for name, size in dists.items() if name != TORCH_DIST and not name.startswith(CUDA_PREFIX)
    }
    for key, label in (
        ("unowned", "(files no distribution lists)"),
        ("venv", "(the venv's bin, include, pyvenv.cfg)"),
    ):
        if probe.get(key):
            python[label] = int(probe[key])
    for folder, size in (probe.get("paths") or {}).items():
        if size:
            python[f"{folder} (on sys.path)"] = int(size)
    if python:
        parts.append(
            SizePart("python packages", "python", sum(python.values()), packages=_largest_first(python))
        )
    cuda_wheels = {name: size for name, size in dists.items() if name.startswith(CUDA_PREFIX)}
    if cuda_wheels:
        parts.append(
            SizePart(
                "CUDA runtime wheels", "cuda", sum(cuda_wheels.values()), packages=_largest_first(cuda_wheels)
            )
        )
    for name, entry in (probe.get("ops") or {}).items():
        archs = {arch: int(size) for arch, size in (entry.get("device") or {}).items()}
        parts.append(
            SizePart(
                name,
                "op",
                int(entry.get("bytes", 0)),
                archs=dict(sorted(archs.items(), key=lambda i: arch_key(i[0]))),
                file=entry.get("file"),
            )
        )
        if entry.get("error"):
            notes.append(f"{name}: its device code could not be read ({entry['error']})")
    other = total_bytes - sum(part.bytes for part in parts)
    if other < 0:
        notes.append(f"the parts add up to {format_bytes(-other)} more than the engine's total: other is 0")
    parts.append(SizePart("other", "other", max(other, 0)))
    return SizeReport(image, total_bytes, tuple(parts), base=base, cuda=cuda or None, notes=tuple(notes))


def _largest_first(sizes: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(sizes.items(), key=lambda item: (-item[1], item[0])))


def base_bytes_of(image_layers: Sequence[str], base_layers: Sequence[str], base_size: int) -> int | None:
    """The base's size when its layers are the image's first ones (the image was built on it)."""
    if not base_layers or list(image_layers[: len(base_layers)]) != list(base_layers):
        return None
    return base_size


# --------------------------------------------------------------------------- budget


class OverBudgetError(BuildFailedError):
    """The image is larger than ``--max-size`` (exit 1); it was not pushed."""


def check_budget(report: SizeReport, max_size: int, *, reported: bool = False) -> None:
    """OverBudgetError naming the largest parts when ``report`` is larger than ``max_size``."""
    if report.total_bytes <= max_size:
        return
    over = report.total_bytes - max_size
    largest = sorted(report.parts, key=lambda part: -part.bytes)[:3]
    raise OverBudgetError(
        f"{report.image} is {format_bytes(report.total_bytes)}, {format_bytes(over)} over --max-size "
        f"{format_bytes(max_size)} ({max_size} bytes); not pushed",
        hint="largest parts: "
        + ", ".join(f"{p.name} ({p.kind}) {format_bytes(p.bytes)}" for p in largest)
        + "\n"
        + "\n".join(report.advice()),
        reported=reported,
    )


# --------------------------------------------------------------------------- measuring


def probe_command() -> list[str]:
    """The image's python running the probe's text (the image needs no file of ours for it)."""
    return ["python", "-c", Path(size_probe.__file__).read_text(encoding="utf-8")]


def parse_probe_output(stdout: str) -> dict[str, Any] | None:
    """The probe's document: the last line of stdout that is a JSON object of its format."""
    for line in reversed(stdout.splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("probe") == size_probe.PROBE_FORMAT:
            return data
    return None


def measure_image(image: str, timeout: float = 300) -> SizeReport:
    """``image``'s parts: the engine's total and base, the rest from the probe in a sealed container.

    Raises BadInputError when the image is not here or was not built by imagegen (no
    ``io.imagegen.target`` label), VerificationFailedError when the probe cannot run in it.
    """
    check_reference("IMAGE", image)
    info = inspect_local(image)
    config = info.get("Config") or {}
    labels = config.get("Labels") or {}
    if TARGET_LABEL not in labels:
        raise BadInputError(
            f"{image} was not built by imagegen (it has no {TARGET_LABEL} label)",
            hint="imagegen size reads images `imagegen build` made; "
            "`docker history` shows any image's layers",
        )
    base = labels.get(BASE_LABEL) or None
    base_bytes = None
    base_count = 0
    # A label is the image's word, not ours: one the engine would refuse as a reference
    # (`Foo/bar`) names no base here, as a base that is gone does.
    base_info = find_image(base) if base is not None and reference_problem(base) is None else None
    if base_info is not None:
        base_count = len((base_info.get("RootFS") or {}).get("Layers") or [])
        base_bytes = base_bytes_of(
            (info.get("RootFS") or {}).get("Layers") or [],
            (base_info.get("RootFS") or {}).get("Layers") or [],
            int(base_info.get("Size") or 0),
        )
    layers = _layers(image, info, base_count if base_bytes is not None else 0)
    try:
        exit_code, stdout, stderr = run_python(SealedRun(image, "size", config, probe_command(), timeout))
    except VerificationFailedError as exc:  # no python, or the container did not start
        raise VerificationFailedError(f"could not measure {image}: {exc.message}", hint=exc.hint) from exc
    document = parse_probe_output(stdout)
    if document is None:
        tail = "\n".join((stdout + "\n" + stderr).strip().splitlines()[-10:])
        raise VerificationFailedError(
            f"could not measure {image}: its python did not print the size probe's result (exit {exit_code})",
            hint="the image needs python and op_builder on PATH, as `imagegen verify` does; last output:\n"
            + tail,
        )
    report = attribute(image, int(info.get("Size") or 0), document, base, base_bytes, labels.get(CUDA_LABEL))
    if not layers:
        note = "layer sizes are read from a local overlay2 engine's layer folders; this engine has none"
        return replace(report, notes=(*report.notes, note))
    return replace(report, layers=layers)


def _layers(image: str, info: Mapping[str, Any], base_layers: int) -> tuple[LayerSize, ...]:
    """Each layer's bytes and what it holds, where the engine's layer folders are here to read
    (streaming the whole image through the engine's export would cost more than the rest of the
    measurement: nothing, then)."""
    if layer_dirs(info) is None:
        return ()
    ids = [str(layer) for layer in (info.get("RootFS") or {}).get("Layers") or []]
    read, _ = read_layers(image, info, ids, hash_file=lambda _: False)
    return layer_sizes([read[i] for i in ids if i in read], base_layers)
