"""Runtime image size against the devel stage it is built from, for the CPU or a CUDA image.

    python bench/image_size.py [--ops cpu_adam,cpu_lion] [--no-bytecode] [--out FILE]
    python bench/image_size.py --cuda [--torch 2.15.0] [--torch-index URL] [--arch "8.0;9.0+PTX"]

Builds (or reuses from the build cache) the ``runtime``, ``build`` and ``devel`` stages of the
image from the local stand-in bases and reports their sizes. Goal: runtime / devel <= 0.5.
The largest runtime layers are listed too, since they say where the remaining bytes are.

The CPU image takes torch from the local wheelhouse. The CUDA image (``--cuda``) is built on
the CUDA 13.0 stand-ins (this machine's toolkit, scripts/standin-images.sh --cuda) with
torch's CUDA 13 wheels from PyPI by default (several GB to download the first time).
Needs Docker and the stand-ins (scripts/ensure-docker.sh, scripts/standin-images.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagegen.engine import build_image  # noqa: E402
from imagegen.engine_probe import Engine, detect_engine  # noqa: E402
from imagegen.images import image_size  # noqa: E402
from imagegen.render import render  # noqa: E402
from imagegen.spec import ImageSpec, SpecInput, build_spec  # noqa: E402

GOAL = 0.5
CUDA_OPS = "fused_adam,fused_lamb,fused_lion,transformer,quantizer,fp_quantizer"


def cpu_spec(ops: str, engine: Engine, bytecode: bool = True) -> ImageSpec:
    """The CPU image the integration tests build, from stand-ins, torch from the local wheelhouse."""
    return build_spec(
        SpecInput(
            ops=ops,
            cpu=True,
            standins=True,
            wheelhouse=os.environ.get("IMAGEGEN_BENCH_WHEELHOUSE", "/opt/wheels"),
            ca_cert=os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
            buildkit=engine.kind != "classic",
            bytecode=bytecode,
        ),
        os.environ,
    )


def cuda_spec(args: argparse.Namespace, engine: Engine) -> ImageSpec:
    """The CUDA 13.0 image from the stand-ins; torch from PyPI (unlabelled CUDA 13 wheels)."""
    return build_spec(
        SpecInput(
            ops=args.ops or CUDA_OPS,
            cuda="13.0",
            standins=True,
            torch=args.torch,
            torch_index=args.torch_index,
            arch=args.arch,
            bytecode=not args.no_bytecode,
            ca_cert=os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
            buildkit=engine.kind != "classic",
        ),
        os.environ,
    )


def _largest_layers(tag: str, count: int = 4) -> list[dict[str, Any]]:
    import docker

    client = docker.from_env()
    try:
        history = client.api.history(tag)
    finally:
        client.close()
    layers = sorted(history, key=lambda h: int(h.get("Size", 0)), reverse=True)[:count]
    return [{"bytes": int(h["Size"]), "created_by": str(h.get("CreatedBy", ""))[:160]} for h in layers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help=f"default: cpu_adam,cpu_lion; with --cuda {CUDA_OPS}")
    parser.add_argument("--cuda", action="store_true", help="the CUDA 13.0 image instead of the CPU one")
    parser.add_argument("--torch", default="2.15.0", help="torch release for --cuda")
    parser.add_argument("--torch-index", default="https://pypi.org/simple", help="torch index for --cuda")
    parser.add_argument("--arch", default="8.0;9.0+PTX", help="arch list for --cuda")
    parser.add_argument("--no-bytecode", action="store_true", help="the image imagegen --no-bytecode builds")
    parser.add_argument("--out", help="default: bench/results/image_size[_cuda13.0][_nobytecode].json")
    args = parser.parse_args()

    from imagegen.commands._context import staged_context

    engine = detect_engine()
    if args.cuda:
        spec = cuda_spec(args, engine)
    else:
        spec = cpu_spec(args.ops or "cpu_adam,cpu_lion", engine, bytecode=not args.no_bytecode)
    suffix = ("" if spec.target == "cpu" else f"_{spec.target}") + ("" if spec.bytecode else "_nobytecode")
    out = Path(args.out or REPO / "bench" / "results" / f"image_size{suffix}.json")
    text = render(spec)
    sizes: dict[str, int] = {}
    name = spec.target + ("" if spec.bytecode else "-nobytecode")
    tags = {stage: f"imagegen-bench/{name}:{stage}" for stage in ("runtime", "build", "devel")}
    with staged_context(spec, REPO) as context:
        for stage, tag in tags.items():
            build_image(engine, context, text, tag, target=stage)
            sizes[stage] = image_size(engine, tag)
    ratio = sizes["runtime"] / sizes["devel"]
    results = {
        "target": spec.target,
        "torch": spec.torch_requirement,
        "ops": spec.ops,
        "bytecode": spec.bytecode,
        "engine": engine.kind,
        "base_devel": spec.base_devel,
        "base_runtime": spec.base_runtime,
        "runtime_bytes": sizes["runtime"],
        "build_stage_bytes": sizes["build"],
        "devel_stage_bytes": sizes["devel"],
        "ratio_runtime_to_devel": round(ratio, 3),
        "ratio_runtime_to_build": round(sizes["runtime"] / sizes["build"], 3),
        "goal_ratio": GOAL,
        "goal_met": ratio <= GOAL,
        "largest_runtime_layers": _largest_layers(tags["runtime"]),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    mib = 1024 * 1024
    print(f"runtime {sizes['runtime'] / mib:.0f} MiB, build stage {sizes['build'] / mib:.0f} MiB, "
          f"devel stage {sizes['devel'] / mib:.0f} MiB")  # fmt: skip
    print(f"runtime / devel = {ratio:.3f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
