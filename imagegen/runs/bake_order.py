"""The order a bake builds its targets in, so that op modules several images share compile once.

The images of one target whose ops build for torch's stable ABI against the same pinned headers
(``--stable-headers``) carry the same op modules whatever their torch release (docs/op-packages.md).
Baked all at once, each image would compile them: BuildKit cannot share the step, as each build
stage stands on its own torch. So a bake builds one image of each such group first (its newest
torch) and the others once that one is done: their compiles are then hits of the compile cache
the first one filled (``imagegen bake --torch-releases`` gives them one).
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


def bake_waves(requests: Sequence[BakeRequest]) -> tuple[tuple[BakeRequest, ...], ...]:
    """``requests`` in the waves a bake runs them in, each wave all at once: first every target
    that shares its op modules with no other, and the newest torch of each group that does;
    then the rest of those groups. One wave when nothing is shared. The order within a wave is
    the order given."""
    groups: dict[Hashable, list[BakeRequest]] = {}
    for request in requests:
        key = shared_modules_key(request.spec)
        if key is not None:
            groups.setdefault(key, []).append(request)
    later: set[str] = set()  # a bake's target names are its own
    for members in groups.values():
        leader = max(members, key=lambda r: Version(r.spec.torch))
        later.update(member.name for member in members if member.name != leader.name)
    first = tuple(r for r in requests if r.name not in later)
    rest = tuple(r for r in requests if r.name in later)
    return (first, rest) if rest else (first,)


def uncached_followers(requests: Sequence[BakeRequest]) -> tuple[str, ...]:
    """The targets of a later wave that have no compile cache: they would compile again what
    the first wave compiled."""
    waves = bake_waves(requests)
    return tuple(r.name for wave in waves[1:] for r in wave if r.spec.compile_cache is None)
