"""--stable-headers: which torch's headers an image's stable-ABI ops compile against.

``value`` checks the option alone (the options table names it); ``pinned`` is the rule that joins
it with the target, the platform, torch and the ops (``build_spec`` applies it): an image pins the
newest torch release of its target, so every image of the target gets the same op modules.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from imagegen import options
from imagegen.errors import BadInputError
from imagegen.imagespec.catalog import Target
from op_builder import stable_abi
from op_builder.registry import Registry

NEWEST: str = options.default("stable_headers")  # the target's newest torch
OWN = "own"  # the image's own torch


def value(text: str | None) -> str:
    """``newest``, ``own`` or a torch release of 2.10 or later (``2.15.0``)."""
    if text is None:
        return NEWEST
    choice = text.strip().lower()
    if choice in (NEWEST, OWN):
        return choice
    try:
        version = Version(choice)
    except InvalidVersion:
        version = None
    if version is None or len(version.release) != 3 or version.local or version.release[:2] < (2, 10):
        raise BadInputError(
            f"--stable-headers {text!r} is neither newest, own nor a torch release of 2.10 or later",
            hint="use newest (the default: the target's newest torch), own (the image's torch), or X.Y.Z",
        )
    return str(version)


def stable_ops(
    accelerator: str, platform: str, torch: str, names: tuple[str, ...], registry: Registry
) -> bool:
    """Some op of ``names`` gets a stable build in such an image (as op_builder.stable_abi decides)."""
    declared = (registry.ops[name].stable_abi for name in names)
    return any(stable_abi.stable_target(d, torch, accelerator, platform) for d in declared)


def pinned(
    choice: str,
    target: Target,
    platform: str,
    torch: str,
    names: tuple[str, ...],
    registry: Registry,
    offline: bool,
) -> str | None:
    """The torch release whose headers the image's stable ops compile against; None: the image's own.

    Only an image with an op that gets a stable build (op_builder.stable_abi: torch >= 2.10, CPU or
    CUDA) has one to pin. ``newest`` is the target's newest torch on the platform (an
    image of that torch pins it too), or the image's own where that is newer (a torch the catalog
    does not know yet); an offline build reads no index, so it keeps its own.
    """
    if choice == OWN or (choice == NEWEST and offline):
        return None
    if not stable_ops(target.accelerator, platform, torch, names, registry):
        return None
    if choice != NEWEST:
        return choice
    # The newest image pins too (its own release): an unpinned build compiles against the
    # installed headers' paths, which would make its modules other bytes than its target's others.
    newest = max((Version(t) for t in target.torch_versions(platform)), default=Version(torch))
    return str(max(newest, Version(torch)))
