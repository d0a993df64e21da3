"""The catalog as the Markdown table of docs/imagegen.md (a unit test keeps the two equal)."""

from __future__ import annotations

from imagegen.imagespec import catalog


def markdown_table() -> str:
    """The catalog as the Markdown table in docs/imagegen.md (a test keeps the two equal)."""
    lines = [
        "| target | devel base | runtime base | distros | Python | torch built | default torch "
        "| wheel index | default archs | platforms (arm64 archs) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target in (*catalog.CUDA_TARGETS.values(), *catalog.ROCM_TARGETS.values(), catalog.CPU_TARGET):
        distro = target.distros[0]
        if target.accelerator == "cpu":
            python = catalog.CPU_DEFAULT_PYTHON
            pythons = f"{catalog.CPU_PYTHONS[0]}–{catalog.CPU_PYTHONS[-1]} (default {python})"
            archs = "-"
        else:
            python = target.default_python(distro)
            pythons = ", ".join(f"{catalog.UBUNTU_PYTHON[d]} ({d})" for d in target.distros)
            version = target.version or ""
            cuda = target.accelerator == "cuda"
            listed = catalog.default_cuda_archs(version) if cuda else catalog.default_rocm_archs()
            archs = ";".join(listed)
        built = target.torch_versions()
        indexes = ", ".join(dict.fromkeys(r.variant for r in target.torch))
        devel, runtime = target.base_devel(distro, python), target.base_runtime(distro, python)
        platforms = ", ".join(p.removeprefix("linux/") for p in target.platforms)
        if target.accelerator == "cuda" and catalog.ARM64 in target.platforms:
            platforms += f" ({';'.join(catalog.default_cuda_archs(target.version or '', catalog.ARM64))})"
        lines.append(
            f"| `{target.name}` | `{devel}` | `{runtime}` "
            f"| {', '.join(target.distros)} | {pythons} | {built[0]}–{built[-1]} | {target.default_torch} "
            f"| {indexes} | {archs} | {platforms} |"
        )
    return "\n".join(lines) + "\n"
