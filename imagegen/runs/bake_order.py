"""The order a bake builds its targets in, so that op modules several images share compile once.

The images of one target whose ops build for torch's stable ABI against the same pinned headers
(``--stable-headers``) carry the same op modules whatever their torch release (docs/op-packages.md).
Baked all at once, each image would compile them: BuildKit cannot share the step, as each build
stage stands on its own torch. So a bake builds one image of each such group first (its newest
torch) and starts the others once that one has compiled: their compiles are then hits of the
compile cache the first one filled (``imagegen bake --torch-releases`` gives them one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from packaging.version import Version

from imagegen.imagespec.spec import ImageSpec
from imagegen.runs.bake_inputs import BakeRequest


def shared_modules_key(spec: ImageSpec) -> Hashable | None:
    """What decides the bytes of ``spec``'s stable op modules, torch aside: images with one key
    carry the same modules. None: no stable op module, or one compiled against the image's own
    torch (its modules are its own)."""
    if not spec.stable_modules or spec.stable_headers is None:
        return None
    return (
        spec.target, spec.platform, spec.build_platform, spec.base_devel, spec.python,
        spec.stable_headers, spec.ops, spec.op_archs, spec.archs, spec.op_packages, spec.compile_cache,
    )  # fmt: skip


def leaders(requests: Sequence[BakeRequest]) -> dict[str, str]:
    """Which target each target waits for: {a target's name: its group's first}, for every
    target of a group of images that share their op modules but the group's newest torch; a
    target missing from it starts at once."""
    groups: dict[Hashable, list[BakeRequest]] = {}
    for request in requests:
        key = shared_modules_key(request.spec)
        if key is not None:
            groups.setdefault(key, []).append(request)
    waiting = {}
    for members in groups.values():
        first = max(members, key=lambda r: Version(r.spec.torch))
        waiting.update({member.name: first.name for member in members if member.name != first.name})
    return waiting


def uncached_followers(requests: Sequence[BakeRequest]) -> tuple[str, ...]:
    """The targets that wait for another but have no compile cache: they would compile again
    what the one they wait for compiled."""
    waiting = leaders(requests)
    return tuple(r.name for r in requests if r.name in waiting and r.spec.compile_cache is None)
