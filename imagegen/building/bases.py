"""Base images: the local stand-ins, and what to do when a spec's bases are not here."""

from __future__ import annotations

from imagegen.engine.images import local_images
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec

STANDIN_SCRIPT = "imagegen standins"
STANDIN_TAGS = (
    f"{catalog.STANDIN_PREFIX}/debian:{catalog.STANDIN_DISTRO}",
    catalog.STANDIN_DEVEL,
    catalog.STANDIN_RUNTIME,
)


def standin_command(target: str = "cpu", platform: str = catalog.DEFAULT_PLATFORM) -> str:
    """The command that makes ``target``'s stand-ins on ``platform``."""
    flags = [] if platform == catalog.DEFAULT_PLATFORM else [f"--platform {platform}"]
    if target != "cpu":
        flags.append("--cuda " + target.removeprefix("cuda"))
    return " ".join([STANDIN_SCRIPT, *flags])


def standin_hint(target: str = "cpu", platform: str = catalog.DEFAULT_PLATFORM) -> str:
    bases = catalog.standin_bases(target, platform)
    assert bases is not None, f"no stand-ins for {target} on {platform}"
    devel, runtime = bases
    script = standin_command(target, platform)
    return (
        f"no registry here? make local stand-in bases with `{script}`, then build with --standins "
        f"(or IMAGEGEN_STANDINS=1), which means --base-devel {devel} --base-runtime {runtime}"
    )


def missing_base_hint(spec: ImageSpec) -> str | None:
    """A hint naming the spec's base images that are not here, with the way to get them."""
    bases = sorted({spec.base_devel, spec.base_runtime})
    present = local_images(bases)
    if present is None:
        return None
    missing = [ref for ref in bases if not present[ref]]
    if not missing:
        return None
    text = "not on this machine: " + ", ".join(missing) + "; "
    if catalog.standin_bases(spec.target, spec.platform) is not None:
        return text + standin_hint(spec.target, spec.platform)
    return text + (
        "pull them where a registry answers and bring them here with `docker save` / `docker load`, "
        "or pass --base-devel/--base-runtime images you have"
    )
