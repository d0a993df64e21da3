"""Runtime image size against the devel stage it is built from, for the CPU or a CUDA image.

    python bench/image_size.py [--ops cpu_adam,cpu_lion] [--bytecode startup|all|none] [--out FILE]
    python bench/image_size.py --cuda [--torch 2.15.0] [--torch-index URL] [--arch "8.0;9.0+PTX"]

Builds (or reuses from the build cache) the ``runtime``, ``build`` and ``devel`` stages of the
image from the local stand-in bases and reports their sizes. Goal: runtime / devel <= 0.5.
The largest runtime layers are listed too, since they say where the remaining bytes are,
and so is the time ``import torch`` takes in a sealed (read-only, no network) container of
the runtime image, since the bytecode mode trades that time against size.

The CPU image takes torch from the local wheelhouse. The CUDA image (``--cuda``) is built on
the CUDA 13.0 stand-ins (this machine's toolkit, `imagegen standins --cuda 13.0`) with
torch's CUDA 13 wheels from the index this machine's pip uses (scripts/pip_index.py) unless
--torch-index or IMAGEGEN_TORCH_INDEX names one (several GB to download the first time).
Needs Docker and the stand-ins (scripts/ensure-docker.sh, `imagegen standins`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _common import write_json  # noqa: E402

from imagegen.engine import Engine, detect_engine  # noqa: E402
from imagegen.engine.client import docker_client  # noqa: E402
from imagegen.engine.sealed import sealed_container_options  # noqa: E402
from imagegen.imagespec.spec import (  # noqa: E402
    BYTECODE_MODES,
    BYTECODE_TAG_SUFFIX,
    ImageSpec,
    build_spec,
    spec_input,
)
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402
from op_builder.listing import op_names  # noqa: E402
from op_builder.registry import builtin_ops  # noqa: E402

GOAL = 0.5
# Every GPU op of ours (the image takes no op package of another), as `python -m op_builder list
# --gpu` names them.
CUDA_OPS = ",".join(op_names(builtin_ops(), "gpu"))


def cpu_spec(ops: str, engine: Engine, bytecode: str | None = None, tag: str | None = None) -> ImageSpec:
    """The CPU image the integration tests build, from stand-ins, torch from the local wheelhouse."""
    return build_spec(
        spec_input(
            os.environ,
            ops=ops,
            cpu=True,
            standins=True,
            tag=tag,
            wheelhouse=os.environ.get("IMAGEGEN_BENCH_WHEELHOUSE", "/opt/wheels"),
            ca_cert=os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
            buildkit=engine.kind != "classic",
            bytecode=bytecode,
        )
    )


def pip_index_url() -> str:
    """The index this machine's pip installs from (as `make image-cuda` finds it)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "pip_index.py")], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(done.stderr.strip())
    return done.stdout.strip()


def cuda_spec(args: argparse.Namespace, engine: Engine) -> ImageSpec:
    """The CUDA 13.0 image from the stand-ins; torch from pip's index (unlabelled CUDA 13 wheels).

    Without an index named, imagegen would use the catalog's download.pytorch.org index, which
    a machine behind a mirror cannot reach; pip's own index is the one this machine can.
    """
    return build_spec(
        spec_input(
            os.environ,
            ops=args.ops or CUDA_OPS,
            cuda="13.0",
            standins=True,
            torch=args.torch,
            torch_index=args.torch_index or os.environ.get("IMAGEGEN_TORCH_INDEX") or pip_index_url(),
            arch=args.arch,
            bytecode=args.bytecode,
            ca_cert=os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
            buildkit=engine.kind != "classic",
        )
    )


def import_torch_seconds(tag: str, runs: int = 5) -> list[float]:
    """``import torch`` timed in ``runs`` fresh containers, each sealed as the verifier's is.

    The first run also warms the page cache, as the first start on a node would; the median
    of the runs is the figure reported.
    """
    probe = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    client = docker_client()
    seconds: list[float] = []
    try:
        for _ in range(runs):
            command = ["python", "-c", probe]
            output = client.containers.run(tag, command, remove=True, **sealed_container_options())
            seconds.append(float(output.decode().split()[-1]))
    finally:
        client.close()
    return seconds


def _largest_layers(tag: str, count: int = 4) -> list[dict[str, Any]]:
    client = docker_client()
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
    parser.add_argument("--torch-index", help="torch index for --cuda (default: the index pip uses here)")
    parser.add_argument("--arch", default="8.0;9.0+PTX", help="arch list for --cuda")
    parser.add_argument(
        "--bytecode", choices=BYTECODE_MODES, help="the image `imagegen --bytecode MODE` builds"
    )
    parser.add_argument(
        "--out", help="default: bench/results/image_size_<name>.json, name as in cpu, cpu-nobytecode"
    )
    args = parser.parse_args()

    engine = detect_engine()
    if args.cuda:
        spec = cuda_spec(args, engine)
    else:
        spec = cpu_spec(args.ops or "cpu_adam,cpu_lion", engine, bytecode=args.bytecode)
    # Named as imagegen's default tags are: the default bytecode mode adds nothing.
    name = spec.target + BYTECODE_TAG_SUFFIX[spec.bytecode]
    out = Path(args.out or REPO / "bench" / "results" / f"image_size_{name}.json")
    sizes: dict[str, int] = {}
    tags = {stage: f"imagegen-bench/{name}:{stage}" for stage in ("runtime", "build", "devel")}
    for stage, tag in tags.items():
        # The same spec under one tag per stage (the tag is not part of the Dockerfile).
        report = pipeline.build(
            replace(spec, tag=tag), RunOptions(verify=False, source=REPO, stage=stage), engine=engine
        )
        sizes[stage] = report.size_bytes
    ratio = sizes["runtime"] / sizes["devel"]
    import_seconds = import_torch_seconds(tags["runtime"])
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
        "import_torch_seconds_median": round(statistics.median(import_seconds), 3),
        "import_torch_seconds": [round(s, 3) for s in import_seconds],
        "largest_runtime_layers": _largest_layers(tags["runtime"]),
    }
    mib = 1024 * 1024
    print(f"runtime {sizes['runtime'] / mib:.0f} MiB, build stage {sizes['build'] / mib:.0f} MiB, "
          f"devel stage {sizes['devel'] / mib:.0f} MiB")  # fmt: skip
    print(f"runtime / devel = {ratio:.3f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})")
    print(f"import torch in a sealed container: {statistics.median(import_seconds):.2f} s (median of "
          f"{len(import_seconds)}, bytecode {spec.bytecode})")  # fmt: skip
    write_json(out, results, "written to")
    return 0


if __name__ == "__main__":
    sys.exit(main())
