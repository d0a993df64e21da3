"""The shapes of every `--json` of a run, held: `imagegen build` (one platform, several) and
`imagegen bake` print one run report (imagegen.runs.report), made here from real reports.

A key renamed, removed or added, or a value of another type, fails here: readers parse these
documents, so a change is made on purpose, with docs/imagegen.md ("One shape for every `--json`
of a run") changed alongside.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import Engine
from imagegen.imagespec.compile_cache import CacheStats, OpCounts
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.oci import publish
from imagegen.oci.push_plan import PushPlan
from imagegen.proof.documents import PROVENANCE, SBOM, Document, ProofDocuments
from imagegen.proof.seal import ProofReport
from imagegen.proof.size import attribute
from imagegen.registry.manifest import OCI_INDEX, OCI_MANIFEST, Descriptor
from imagegen.runs import multiarch, pipeline
from imagegen.runs.finish import Finished
from imagegen.runs.report import ImageReport, RunImage, RunReport, image_report
from imagegen.runs.run_choices import RunOptions
from imagegen.verify.container import VerifyResult
from op_builder.report import OpVerification

ENGINE = Engine("buildkit", "/usr/bin/docker", "20.10.24")
NULL = type(None)
# The keys every run's document has, whichever command printed it.
RUN = {"ok": bool, "images": list, "index": (dict, NULL), "builder": (str, NULL), "driver": (str, NULL)}
# An image's own object: `imagegen build --json`'s top level (one platform) and each entry of
# `platforms` (several), as they have been printed, plus `platform`.
IMAGE = {
    "ok": bool, "tag": str, "target": str, "platform": str, "ops": list, "archs": list,
    "torch": str, "python": str, "engine": str, "size_bytes": int, "build_seconds": float,
    "verify_seconds": (float, NULL), "verify": (dict, NULL), "pushed": bool, "proof": (dict, NULL),
    "image_id": str, "stage": str, "steps": list, "compile_seconds": dict,
    "compile_cache": (dict, NULL), "size": (dict, NULL), "max_size_bytes": (int, NULL),
    "published": (dict, NULL),
}  # fmt: skip
# An entry of `images`, in every command: bake's keys as bake has printed them (`target`: the
# name in the matrix; `pushed`: the reference pushed or null), then the rest of the image's.
ENTRY = {
    "target": str, "platform": str, "tag": str, "ok": bool, "result": str,
    "size_bytes": (int, NULL), "build_seconds": (float, NULL), "verify_seconds": (float, NULL),
    "pushed": (str, NULL), "error": (str, NULL), "compile_seconds": dict,
    "compile_cache": (dict, NULL), "verify": (dict, NULL), "catalog_target": (str, NULL),
    "ops": (list, NULL), "archs": (list, NULL), "torch": (str, NULL), "python": (str, NULL),
    "engine": (str, NULL), "proof": (dict, NULL), "image_id": (str, NULL), "stage": (str, NULL),
    "steps": (list, NULL), "size": (dict, NULL), "max_size_bytes": (int, NULL),
    "published": (dict, NULL),
}  # fmt: skip
# Each command's own keys beside the run's: one platform's are the image's object.
PLATFORMS = {"tag": (str, NULL), "pushed": bool, "platforms": list}


def spec(platform: str = "linux/amd64", **changes: Any) -> ImageSpec:
    inp = SpecInput(cpu=True, ops="cpu_adam,cpu_lion", tag="it:1", platform=platform, **changes)
    return build_spec(inp)


def verified(tag: str, failing: tuple[str, ...] = ()) -> VerifyResult:
    ops = tuple(
        OpVerification(
            op,
            op not in failing,
            None if op in failing else "aot",
            0.01,
            "not installed" if op in failing else None,
        )
        for op in ("cpu_adam", "cpu_lion")
    )
    return VerifyResult(tag, not failing, "2.13.0", None, None, ops, 2.26)


def report(
    image: ImageSpec, *, failing: tuple[str, ...] = (), pushed: bool = False, max_size: int | None = None
) -> ImageReport:
    """An image as the finish sequence leaves it: sealed, measured, verified, maybe pushed."""
    documents = ProofDocuments(Document(SBOM, b"{}"), Document(PROVENANCE, b"{}"))
    proof = ProofReport(documents, Path("/tmp/imagegen-proof"), "sha256:sealed", "sha256:runtime")
    size = attribute(
        image.tag, 123 * 2**20, {"dists": {"torch": 90 * 2**20}, "ops": {}}, "base:1", 10 * 2**20
    )
    published = publish.Published(image.tag, Descriptor.of(OCI_MANIFEST, b"{}"), None) if pushed else None
    ok = not failing and (max_size is None or size.total_bytes <= max_size)
    done = Finished(proof, size, verified(image.tag, failing), ok, published, image.tag if pushed else None)
    log = ("#9 20.1 op_builder: built cpu_adam in 19.64s",)
    made = image_report(
        image, "buildkit", "sha256:abc", 12.34, log, done, size_bytes=size.total_bytes, max_size=max_size
    )
    # A compile cache's counts, as a build with --compile-cache reads them from its log.
    stats = CacheStats(2, 1, 0, "Redis", {"cpu_adam": OpCounts(2, 1)})
    return made if pushed else replace(made, compile_cache=stats)


def printed(run: RunReport) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(run.to_json()))  # as a reader gets it
    return data


def assert_shape(data: dict[str, Any], shape: dict[str, Any], where: str) -> None:
    assert set(data) == set(shape), f"{where}: {sorted(set(data) ^ set(shape))}"
    for key, kind in shape.items():
        assert isinstance(data[key], kind) and not (kind is int and isinstance(data[key], bool)), (where, key)


def assert_entries(data: dict[str, Any]) -> None:
    for entry in data["images"]:
        assert_shape(entry, ENTRY, f"images[{entry['target']}]")


# ------------------------------------------------------------------ the three commands


def test_one_platform_keeps_the_image_object_and_adds_the_run() -> None:
    arm64 = spec("linux/arm64")
    data = printed(RunReport.one_image(arm64, report(arm64, pushed=True)))
    assert_shape(data, {**IMAGE, **RUN}, "build")
    assert_entries(data)
    (entry,) = data["images"]
    # The image's keys at the top level are as they were: the catalog's target, pushed a bool.
    assert (data["target"], data["pushed"], data["platform"]) == ("cpu", True, "linux/arm64")
    # Its entry: bake's meanings, the same in every command.
    assert (entry["target"], entry["catalog_target"], entry["pushed"]) == ("cpu-arm64", "cpu", "it:1")
    assert entry["result"] == "pushed" and entry["error"] is None
    assert (data["index"], data["builder"], data["driver"]) == (None, None, None)
    # Everything else of the entry is the image's own.
    assert {k: v for k, v in entry.items() if k in IMAGE and k not in ("target", "pushed")} == {
        k: v for k, v in data.items() if k in ENTRY and k not in ("target", "pushed")
    }


def test_several_platforms_keep_platforms_and_add_images(monkeypatch: pytest.MonkeyPatch) -> None:
    # Through build_platforms itself, each platform's build answered by a real report.
    monkeypatch.setattr(multiarch, "detect_engine", lambda env, prefer_buildkit: ENGINE)
    monkeypatch.setattr(pipeline, "build", lambda image, run, engine=None: report(image))
    index = Descriptor.of(OCI_INDEX, b"{}")
    signers = []
    monkeypatch.setattr(
        multiarch, "publish_index", lambda tag, published, signer: signers.append(signer) or index
    )
    monkeypatch.setattr(
        multiarch,
        "publish_image",
        lambda engine, tag, *a: publish.Published(tag, Descriptor.of(OCI_MANIFEST, tag.encode()), None),
    )
    tag = "reg.example:5000/ops/cpu:1"
    push = PushPlan.for_build(push=True, verify=True, tag=tag, platforms=2)
    key: Any = object()  # a signer, passed along as it is
    run = multiarch.build_platforms(
        [spec(), spec("linux/arm64")], tag, RunOptions(push=push, source=Path("."), signer=key)
    )
    data = printed(run)
    assert_shape(data, {**RUN, **PLATFORMS}, "build --platform")
    assert data["pushed"] is True and data["tag"] == tag and data["index"]["digest"] == index.digest
    for entry in data["platforms"]:
        assert_shape(entry, IMAGE, f"platforms[{entry['platform']}]")
    assert_entries(data)
    assert [e["target"] for e in data["images"]] == ["cpu", "cpu-arm64"]
    assert [e["pushed"] for e in data["images"]] == [f"{tag}-amd64", f"{tag}-arm64"]
    assert [p["pushed"] for p in data["platforms"]] == [True, True]
    assert signers == [key]  # the run's signer signs the index too
    # Not pushed: no index, and the same keys.
    unpushed = printed(
        multiarch.build_platforms([spec(), spec("linux/arm64")], None, RunOptions(source=Path(".")))
    )
    assert_shape(unpushed, {**RUN, **PLATFORMS}, "build --platform, not pushed")
    assert unpushed["pushed"] is False and unpushed["index"] is None and unpushed["tag"] is None


def test_bake_keeps_its_images_and_adds_the_rest() -> None:
    cpu, arm64 = spec(), spec("linux/arm64")
    images = (
        RunImage("cpu", cpu.platform, cpu.tag, report(cpu, pushed=True)),
        RunImage("cpu-arm64", arm64.platform, arm64.tag, report(arm64, failing=("cpu_lion",))),
        RunImage("cuda13-0", "linux/amd64", "t:3", None, stopped="boom", seconds=3.0),
    )
    data = printed(RunReport("bake", images, builder="ci", driver="docker-container"))
    assert_shape(data, RUN, "bake")
    assert_entries(data)
    good, failed, broken = data["images"]
    assert data["ok"] is False and (data["builder"], data["driver"]) == ("ci", "docker-container")
    assert (good["result"], good["pushed"], good["ok"]) == ("pushed", "it:1", True)
    assert (failed["result"], failed["pushed"]) == ("verify failed", None)
    assert failed["error"] == "cpu_lion (not installed)"
    assert failed["compile_cache"]["ops"]["cpu_adam"] == {"hits": 2, "misses": 1}
    # Stopped before any report: where and why, and the report's keys null.
    assert (broken["result"], broken["error"], broken["build_seconds"]) == ("build failed", "boom", 3.0)
    assert broken["compile_seconds"] == {}
    kept = {"target", "platform", "tag", "ok", "result", "error", "build_seconds", "compile_seconds"}
    assert {key for key in ENTRY if broken[key] is not None} == kept


def test_every_run_has_the_same_run_keys_and_entry_keys() -> None:
    one = printed(RunReport.one_image(spec(), report(spec())))
    several = printed(RunReport("platforms", (RunImage.of(spec(), report(spec())),)))
    baked = printed(
        RunReport("bake", (RunImage("cpu", "linux/amd64", "it:1", report(spec())),), driver="docker")
    )
    for data in (one, several, baked):
        assert set(RUN) <= set(data)
        assert [set(entry) for entry in data["images"]] == [set(ENTRY)]
    # One image, one entry: the same whichever command made it.
    assert one["images"] == several["images"] == baked["images"]


def test_an_image_over_its_budget_says_so() -> None:
    image = report(spec(), max_size=2**20)
    entry = RunImage.of(spec(), image)
    assert not image.ok and image.over_budget and entry.result == "over budget"
    assert entry.error is not None and "over --max-size" in entry.error
