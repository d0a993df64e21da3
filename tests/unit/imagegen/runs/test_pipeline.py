"""The build pipeline and `imagegen build` with the engine answered by hand (no Docker needed)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.engine import BuildResult, Engine
from imagegen.errors import BuildFailedError
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.oci import publish
from imagegen.oci.push_plan import PushPlan
from imagegen.proof.documents import PROVENANCE, SBOM, Document, ProofDocuments
from imagegen.proof.seal import ProofReport
from imagegen.proof.size import SizeReport, attribute
from imagegen.registry.manifest import OCI_MANIFEST, Descriptor
from imagegen.runs import finish, pipeline
from imagegen.runs.report import ImageReport
from imagegen.runs.run_choices import RunOptions
from imagegen.verify.container import VerifyResult
from op_builder.report import OpVerification

REPO = Path(__file__).resolve().parents[4]
ENGINE = Engine("buildkit", "/usr/bin/docker", "20.10.24")
# The keys `imagegen build --json` has always printed; the report may add more.
SUMMARY_KEYS = {
    "ok", "tag", "target", "ops", "archs", "torch", "python", "engine",
    "size_bytes", "build_seconds", "verify_seconds", "verify", "pushed",
}  # fmt: skip


class FakeEngine:
    """Records what the pipeline asked of the engine; ``failing`` ops do not verify."""

    def __init__(
        self,
        failing: tuple[str, ...] = (),
        build_error: BuildFailedError | None = None,
        log: tuple[str, ...] = ("#1 DONE 0.1s",),
    ) -> None:
        self.failing = failing
        self.build_error = build_error
        self.log = log
        self.calls: list[str] = []
        self.context_files: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pipeline, "detect_engine", self.detect_engine)
        monkeypatch.setattr(pipeline, "build_image", self.build_image)
        monkeypatch.setattr(pipeline, "image_size", lambda engine, tag: 123 * 2**20)
        monkeypatch.setattr(finish, "verify_image", self.verify_image)
        monkeypatch.setattr(finish, "measure_image", self.measure_image)
        monkeypatch.setattr(finish, "seal_image", self.seal_image)
        monkeypatch.setattr(publish, "push_image", lambda engine, tag: self.calls.append(f"push {tag}"))
        monkeypatch.setattr(publish, "attach_proof", self.attach_proof)
        monkeypatch.setattr(pipeline, "missing_base_hint", lambda spec: f"not here: {spec.base_devel}")

    def detect_engine(self, env: object, prefer_buildkit: bool = True) -> Engine:
        self.calls.append("detect")
        return ENGINE

    def build_image(self, engine: Engine, context: Path, text: str, tag: str, **kw: Any) -> BuildResult:
        self.calls.append(f"build {tag} {kw['target']} no_cache={kw['no_cache']}")
        self.context_files = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
        if self.build_error is not None:
            raise self.build_error
        return BuildResult(tag, "sha256:abc", 12.34, log=self.log)

    def seal_image(self, engine: Engine, spec: ImageSpec, **kw: Any) -> ProofReport:
        # The proof step: its own image (the runtime image plus the documents) under the same tag.
        self.calls.append(f"proof {spec.tag} from {kw['runtime_image_id']}")
        documents = ProofDocuments(Document(SBOM, b"{}"), Document(PROVENANCE, b"{}"))
        directory = Path(tempfile.gettempdir(), "imagegen-test-proof")  # `imagegen build` writes build.json
        directory.mkdir(exist_ok=True)
        return ProofReport(documents, directory, "sha256:sealed")

    def attach_proof(
        self, tag: str, documents: ProofDocuments | None = None, signer: object = None
    ) -> publish.Published:
        # The registry's side of a push: the manifest found, the proof's documents attached to it.
        self.calls.append(f"attach {tag} {len(documents.all()) if documents else 0}")
        return publish.Published(tag, Descriptor.of(OCI_MANIFEST, b"{}"), None)

    def measure_image(self, tag: str) -> SizeReport:
        # What the probe reports for the CPU image: torch, one other distribution, the ops.
        self.calls.append(f"size {tag}")
        probe = {"dists": {"torch": 90 * 2**20, "numpy": 20 * 2**20}, "ops": {"cpu_adam": {"bytes": 2**20}}}
        return attribute(tag, 123 * 2**20, probe, "base:1", 10 * 2**20)

    def verify_image(self, tag: str, ops: tuple[str, ...]) -> VerifyResult:
        self.calls.append(f"verify {tag}")
        results = tuple(
            OpVerification(
                op,
                op not in self.failing,
                "aot" if op not in self.failing else None,
                0.01,
                "not installed ahead of time" if op in self.failing else None,
            )
            for op in ops
        )
        return VerifyResult(tag, all(r.ok for r in results), "2.13.0", None, None, results, 2.26)


TO_TAG = PushPlan.for_build(push=True, verify=True, tag=None)
UNDER_REGISTRY = PushPlan.for_bake("reg.example:5000", verify=True)


def spec(**changes: Any) -> ImageSpec:
    return build_spec(SpecInput(cpu=True, ops="cpu_adam,cpu_lion", tag="it:1", **changes))


def test_report_has_every_summary_key_with_its_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    report = pipeline.build(spec(), RunOptions(source=REPO))
    assert engine.calls == [
        "detect", "build it:1 runtime no_cache=False", "proof it:1 from sha256:abc",
        "size it:1", "verify it:1",
    ]  # fmt: skip
    # Staged: the build inputs, and of imagegen only the script that splits the runtime's layers.
    staged = engine.context_files
    assert "setup.py" in staged and ".venv" not in {f.split("/")[0] for f in staged}
    assert [f for f in staged if f.startswith("imagegen/")] == ["imagegen/render/split_layers.py"]
    data = report.to_json()
    assert set(data) >= SUMMARY_KEYS
    assert data["ok"] is True and data["pushed"] is False
    assert data["tag"] == "it:1" and data["target"] == "cpu" and data["engine"] == "buildkit"
    assert data["ops"] == ["cpu_adam", "cpu_lion"] and data["archs"] == []
    assert data["size_bytes"] == 123 * 2**20
    assert data["build_seconds"] == 12.3 and data["verify_seconds"] == 2.3
    assert data["verify"]["ok"] is True and [op["name"] for op in data["verify"]["ops"]] == list(report.ops)
    assert [step["name"] for step in data["steps"]] == ["engine", "build", "proof", "size", "verify"]
    # The sealed image is the one built: its id, and where its SBOM and provenance are.
    assert data["image_id"] == "sha256:sealed"
    assert data["proof"]["documents"]["sbom"]["digest"].startswith("sha256:")
    assert report.log == ("#1 DONE 0.1s",)
    json.dumps(data)  # serialisable as it is


def test_failed_verification_is_a_report_and_nothing_is_pushed(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine(failing=("cpu_lion",))
    engine.install(monkeypatch)
    report = pipeline.build(spec(), RunOptions(source=REPO, push=TO_TAG))
    assert not report.ok and not report.pushed and report.failed_ops == ("cpu_lion",)
    assert not any(call.startswith("push") for call in engine.calls)


def test_push_after_verification_and_a_given_engine_is_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    report = pipeline.build(spec(), RunOptions(source=REPO, no_cache=True, push=TO_TAG), engine=ENGINE)
    assert report.ok and report.pushed
    assert engine.calls == [
        "build it:1 runtime no_cache=True", "proof it:1 from sha256:abc",
        "size it:1", "verify it:1", "push it:1", "attach it:1 2",
    ]  # fmt: skip
    # The proof attached is the one the build sealed in: both documents.
    assert report.published is not None and report.to_json()["published"]["reference"] == "it:1"


def test_a_stage_without_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    report = pipeline.build(spec(), RunOptions(source=REPO, verify=False, stage="devel"), engine=ENGINE)
    assert report.ok and report.verify is None and report.to_json()["verify_seconds"] is None
    assert report.proof is None  # only a runtime image gets an SBOM
    assert engine.calls == ["build it:1 devel no_cache=False"]


def test_build_failure_gets_the_base_image_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine(build_error=BuildFailedError("building it:1 failed", hint="log")).install(monkeypatch)
    with pytest.raises(BuildFailedError) as info:
        pipeline.build(spec(), RunOptions(source=REPO))
    assert info.value.message == "building it:1 failed"
    assert info.value.hint == f"not here: {spec().base_devel}\nlog"


def test_classic_engine_builds_the_classic_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    rendered: list[bool] = []
    monkeypatch.setattr(pipeline, "render", lambda s: rendered.append(s.buildkit) or "FROM scratch\n")
    pipeline.build(spec(), RunOptions(source=REPO, verify=False), engine=Engine("classic", None, "20.10.24"))
    assert rendered == [False]


runner = CliRunner()
BUILD = ["build", "--cpu", "--ops", "cpu_adam,cpu_lion", "--tag", "it:1", "--source", str(REPO)]


def test_build_json_prints_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine().install(monkeypatch)
    result = runner.invoke(app, [*BUILD, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= SUMMARY_KEYS and data["ok"] is True
    # The run's shape too (tests/unit/imagegen/runs/test_run_report.py holds it): the image as its one entry.
    (image,) = data["images"]
    assert (image["target"], image["tag"], image["pushed"], image["result"]) == (
        "cpu",
        "it:1",
        None,
        "verified",
    )


def test_build_json_failed_verification_is_one_document_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine(failing=("cpu_adam",)).install(monkeypatch)
    result = runner.invoke(app, [*BUILD, "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)  # the summary alone: no {"error": ...} after it
    assert data["ok"] is False and data["verify"]["ok"] is False


def test_build_text_failed_verification_says_which_op(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine(failing=("cpu_adam",)).install(monkeypatch)
    result = runner.invoke(app, BUILD)
    assert result.exit_code == 1
    assert "tag" in result.stdout and "123 MiB" in result.stdout
    assert "failed verification: cpu_adam (not installed ahead of time)" in result.stderr


def test_build_text_shows_each_ops_compile_time(monkeypatch: pytest.MonkeyPatch) -> None:
    log = (
        "#17 70.9   op_builder: built cpu_lion in 12.0s",
        "#17 71.2   op_builder: built cpu_adam in 41.25s",
    )
    FakeEngine(log=log).install(monkeypatch)
    result = runner.invoke(app, BUILD)
    assert result.exit_code == 0, result.output
    # The key column is as wide as its longest key: spaces between key and value vary.
    assert re.search(r"^compile +cpu_lion 12\.0s, cpu_adam 41\.2s$", result.stdout, re.M), result.stdout
    # A build whose ops came from the layer cache compiled nothing.
    FakeEngine().install(monkeypatch)
    assert re.search(r"^compile +-$", runner.invoke(app, BUILD).stdout, re.M)


def test_bake_finishes_an_image_with_the_same_sequence_and_report(monkeypatch: pytest.MonkeyPatch) -> None:
    # bake's builder made the image; the finish sequence and the report are `imagegen build`'s.
    import datetime

    from imagegen.runs import bake
    from imagegen.runs.bake_inputs import BakeRequest

    engine = FakeEngine()
    engine.install(monkeypatch)
    monkeypatch.setattr(bake, "inspect_image_id", lambda tag: "sha256:baked")
    monkeypatch.setattr(finish, "_tag_image", lambda source, target: engine.calls.append(f"tag {target}"))
    run = bake._Run("cpu", None, 0.0, ["#9 20.1 op_builder: built cpu_adam in 19.64s"], 42.0, 0)  # type: ignore[arg-type]
    when = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
    made = bake._Made(REPO, {"cpu": {}}, when, when)
    image = bake._finish(ENGINE, BakeRequest("cpu", spec()), run, RunOptions(push=UNDER_REGISTRY), made)
    assert engine.calls == [
        "proof it:1 from sha256:baked", "size it:1", "verify it:1",
        "tag reg.example:5000/it:1", "push reg.example:5000/it:1", "attach reg.example:5000/it:1 2",
    ]  # fmt: skip
    assert isinstance(image.report, ImageReport)
    assert image.ok and image.report.ok and image.pushed == "reg.example:5000/it:1"
    assert image.size_bytes == image.report.size_bytes == 123 * 2**20
    assert image.verify is image.report.verify and image.report.compile_seconds == {"cpu_adam": 19.64}
    # A failing op: the same report says so, nothing is pushed.
    engine.calls.clear()
    engine.failing = ("cpu_lion",)
    failed = bake._finish(ENGINE, BakeRequest("cpu", spec()), run, RunOptions(push=UNDER_REGISTRY), made)
    assert not failed.ok and failed.report is not None and failed.report.failed_ops == ("cpu_lion",)
    assert not any(call.startswith(("tag", "push")) for call in engine.calls)
