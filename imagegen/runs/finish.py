"""The one finish sequence of a built runtime image, written once: seal its proof -> measure
it -> verify it in a sealed container -> push it, only when it verified and fits its budget.

``imagegen build`` (``pipeline.build``), several platforms (``multiarch``, through
``pipeline.build``) and ``imagegen bake`` (``bake.bake``, for each image its builder made) all
run it, so the rules of the sequence (the proof sealed before verification, so that verify and
a push see the final image; nothing pushed that did not verify; the size measured once, by
part, the engine's total among them) hold the same way for every path.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from imagegen import log
from imagegen.engine import Engine
from imagegen.engine.images import tag_image
from imagegen.imagespec.spec import ImageSpec
from imagegen.oci.publish import Published, publish_image
from imagegen.proof.seal import ProofReport, seal_image
from imagegen.proof.size import SizeReport, measure_image
from imagegen.runs.run_choices import RunOptions
from imagegen.verify.container import VerifyResult, verify_image

# A step of the sequence: (name, title) -> a context that times it (pipeline's report keeps the
# timings; bake only prints the step headers).
Step = Callable[[str, str], AbstractContextManager[None]]


@contextmanager
def logged_step(name: str, title: str) -> Iterator[None]:
    with log.step(title):
        yield


@dataclass(frozen=True)
class Built:
    """A runtime image an engine just made from ``spec``: what its proof names."""

    spec: ImageSpec
    image_id: str  # the runtime stage's, before the proof layer
    dockerfile: str
    root: Path  # the project checkout it was built from
    context_digests: Mapping[str, str]
    started: datetime.datetime
    finished: datetime.datetime


@dataclass(frozen=True)
class Finished:
    proof: ProofReport
    size: SizeReport  # the sealed image by part; its total is the engine's
    verify: VerifyResult | None  # None: not verified
    ok: bool  # verified (or not asked to) and within the size budget
    published: Published | None  # None: not pushed
    pushed_as: str | None  # the reference pushed

    @property
    def size_bytes(self) -> int:
        return self.size.total_bytes


def finish(engine: Engine, built: Built, run: RunOptions, step: Step = logged_step) -> Finished:
    """Seal, measure, verify and push ``built``'s image (as ``run.push`` says: ``PushPlan.reference``).
    Raises what each step raises (the verifier cannot run, a push fails); a failed verification
    or an image over ``run.max_size`` is not ``ok`` and not pushed."""
    spec, signer, max_size = built.spec, run.signer, run.max_size
    with step("proof", f"SBOM and provenance of {spec.tag}"):
        proof = seal_image(
            engine, spec, runtime_image_id=built.image_id, dockerfile=built.dockerfile, root=built.root,
            context_digests=built.context_digests, started=built.started, finished=built.finished,
            signer=signer, directory=run.proof_dir,
        )  # fmt: skip
    with step("size", f"measure {spec.tag}"):
        size = measure_image(spec.tag)
    verified = None
    if run.verify:
        with step("verify", f"verify {spec.tag}"):
            verified = verify_image(spec.tag, ops=spec.ops)
    ok = (verified is None or verified.ok) and (max_size is None or size.total_bytes <= max_size)
    published = None
    push_as = run.push.reference(spec.tag)
    if push_as is not None and ok:
        with step("push", f"push {push_as}"):
            if push_as != spec.tag:
                _tag_image(spec.tag, push_as)
            published = publish_image(engine, push_as, verified, proof.documents, signer)
    return Finished(proof, size, verified, ok, published, None if published is None else push_as)


def _tag_image(source: str, target: str) -> None:
    """Give ``source`` the name ``target`` (bake pushes ``REGISTRY/<tag>``)."""
    tag_image(source, target)
