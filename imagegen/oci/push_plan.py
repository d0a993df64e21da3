"""Where a run pushes, decided once from its options, with the push rule checked as it is made.

A run pushes nowhere; each image under its own tag (``imagegen build --push``); each image under a
registry prefix (``imagegen bake --push REGISTRY``); or several platforms' images under one tag as
an image index (``imagegen build --platform A,B --push --tag REGISTRY/NAME:TAG``). The rule,
whichever the kind: nothing is pushed that was not verified (``--push`` with ``--no-verify`` is
refused), and a reference pushed to must be one a registry takes. Commands make the plan before
any work; ``finish`` asks it what to push a verified image as, and the several-platform step
pushes the platforms and their index once every platform passed. Changing the rule changes this
module and its tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from imagegen.errors import BadInputError
from imagegen.imagespec.reference import reference_problem
from imagegen.registry.distribution import names_registry, parse_reference
from imagegen.urls import redact

Kind = Literal["none", "tag", "registry", "index"]
_REGISTRY_FORM = "use HOST[:PORT][/PATH], e.g. registry.internal:5000/ml: bake adds each image's NAME:TAG"


@dataclass(frozen=True)
class PushPlan:
    """``kind``: where to push; ``target``: the registry prefix (``registry``) or the index's tag
    (``index``), None otherwise. Made by ``for_build`` / ``for_bake``, which check the rule."""

    kind: Kind = "none"
    target: str | None = None

    @property
    def pushes(self) -> bool:
        return self.kind != "none"

    def reference(self, tag: str) -> str | None:
        """What ``finish`` pushes the verified image ``tag`` as; None: ``finish`` pushes nothing
        (no push, or an index, whose platforms are pushed together once all of them passed)."""
        if self.kind == "tag":
            return tag
        if self.kind == "registry":
            assert self.target is not None  # for_bake
            return remote_tag(self.target, tag)
        return None

    def check_references(self, tags: Sequence[str]) -> None:
        """BadInputError when an image's reference under the plan's registry is not one Docker takes."""
        if self.kind == "registry":
            assert self.target is not None  # for_bake
            check_push_registry(self.target, tags)

    @classmethod
    def for_build(cls, *, push: bool, verify: bool, tag: str | None, platforms: int = 1) -> PushPlan:
        """``imagegen build``'s plan: its own tag, or with several platforms an index under ``tag``."""
        if not push:
            return NO_PUSH
        _require_verification(verify)
        if platforms <= 1:
            return cls("tag")
        if tag is None or not names_registry(tag):
            raise BadInputError(
                f"--push of several platforms needs --tag REGISTRY/NAME:TAG (got {tag or 'no --tag'})",
                hint="the platforms' images and their index go there, e.g. --tag 127.0.0.1:5000/ops/cpu:1",
            )
        parse_reference(tag)  # a malformed one is bad input too
        return cls("index", tag)

    @classmethod
    def for_bake(cls, registry: str | None, *, verify: bool, tags: Sequence[str] = ()) -> PushPlan:
        """``imagegen bake``'s plan: each image (``tags``) under ``registry`` (host[:port][/path])."""
        if registry is None:
            return NO_PUSH
        _require_verification(verify)
        check_push_registry(registry, tags)
        return cls("registry", registry)


NO_PUSH = PushPlan()


def _require_verification(verify: bool) -> None:
    if not verify:
        raise BadInputError(
            "--push with --no-verify: images are pushed only after verification passed",
            hint="drop --no-verify, or push the image yourself",
        )


def remote_tag(registry: str, tag: str) -> str:
    """``tag`` under ``registry`` (host[:port][/path]): ``imagegen:cpu-x`` -> ``REGISTRY/imagegen:cpu-x``."""
    return f"{registry.rstrip('/')}/{tag}"


def check_push_registry(registry: str, tags: Sequence[str] = ()) -> None:
    """BadInputError when ``--push REGISTRY`` is not a registry (and path) to push under, or an
    image's reference under it (``REGISTRY/<tag>``) is not one Docker accepts."""
    # A registry holds no '@': text before one may be a user and password (https://USER:PW@host).
    redacted = redact(registry)
    shown = redacted if len(redacted) <= 80 else redacted[:77] + "..."
    problem = _registry_problem(registry)
    if problem is not None:
        raise BadInputError(f"--push {shown!r} is not a registry to push to: {problem}", hint=_REGISTRY_FORM)
    for tag in tags:
        reference = remote_tag(registry, tag)
        problem = reference_problem(reference, allow_digest=False)
        if problem is not None:
            raise BadInputError(
                f"--push {shown!r}: the image {tag} would be pushed as {reference}, which is not "
                f"a valid image reference: {problem}",
                hint=_REGISTRY_FORM,
            )


def _registry_problem(registry: str) -> str | None:
    text = registry.strip()
    if not text.strip("/"):
        return "it is empty"
    if "://" in text:
        return "it has a scheme: name the host alone (plain HTTP: the loopback, IMAGEGEN_INSECURE_REGISTRIES)"
    if "@" in text:
        return "it has a digest (@...): bake pushes each image under its own tag"
    *_, last = text.rstrip("/").split("/")
    if "/" in text.rstrip("/") and ":" in last:
        return f"it ends in a tag ({last}): bake pushes each image under its own NAME:TAG"
    return None
