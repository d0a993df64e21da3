"""A compile cache shared by builders: a cold build against a cold builder with a warm cache.

    python bench/compile_cache.py [--ops all] [--out bench/results/compile_cache.json]

Starts Debian's ``redis-server`` on a free loopback port (empty, nothing saved to disk), then
builds the CPU image from the stand-ins twice with ``--compile-cache redis://127.0.0.1:PORT``,
each with the layer cache off (``--no-cache``: every step runs, and on this engine the
BuildKit cache mounts start empty too, moby/buildkit#1213), as a fresh builder would:

1. ``cold``: the cache is empty, every compilation is a miss;
2. ``warm``: another spec of the same ops (another tag), so nothing of the first build's
   layers is reused; its compilations come from Redis.

``--cuda X.Y`` does the same for a CUDA image's GPU ops (``--ops``, default transformer) from that
CUDA's stand-ins, nvcc going through sccache too, up to the build stage (the runtime stage would
copy several GB of CUDA torch per build for nothing measured here). The devel stage comes from
the layer cache; the compile step runs each time because its text names the cache, spelled
``127.0.0.1`` for the cold build and ``localhost`` for the warm one: the same Redis.

Reported: the compile step's seconds (the build stage's RUN that compiles the ops, from
BuildKit's log), each op's compile seconds (op_builder's lines), sccache's hits and misses,
and warm / cold of the compile step. Goal: <= 0.25.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagegen.engine import detect_engine  # noqa: E402
from imagegen.engine.log_lines import BK_HEADER  # noqa: E402
from imagegen.imagespec import compile_cache  # noqa: E402
from imagegen.imagespec.spec import build_spec, spec_input  # noqa: E402
from imagegen.runs import pipeline  # noqa: E402
from imagegen.runs.run_choices import RunOptions  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from image_size import cpu_spec, pip_index_url  # noqa: E402

GOAL = 0.25
_DONE = re.compile(r"^#(\d+) DONE (\d+(?:\.\d+)?)s$")
# The build stage's compile step echoes this first (imagegen/render/templates/Dockerfile.j2).
_COMPILE_STEP = "imagegen: building ops"


def compile_step_seconds(log: Sequence[str]) -> float | None:
    """Seconds of the RUN step that compiled the ops, from a BuildKit plain log."""
    step: str | None = None
    for line in log:
        m = BK_HEADER.match(line)
        if m and _COMPILE_STEP in m.group(3):
            step = m.group(1)
        done = _DONE.match(line)
        if done and step is not None and done.group(1) == step:
            return float(done.group(2))
    return None


def cuda_spec(cuda: str, ops: str) -> Any:
    """The CUDA image of ``ops`` from the stand-ins, torch from the index this machine's pip uses."""
    return build_spec(
        spec_input(
            os.environ,
            ops=ops,
            cuda=cuda,
            standins=True,
            torch_index=os.environ.get("IMAGEGEN_BENCH_TORCH_INDEX") or pip_index_url(),
            ca_cert=os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"),
        )
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_on_loopback() -> Iterator[str]:
    """An empty Redis on 127.0.0.1 for the run; its URL. Stopped (and its data gone) after."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("no redis-server here: apt-get install redis-server")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="imagegen-redis-") as folder:
        argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        argv += ["--dir", folder]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        sys.exit("redis-server did not start")
                    time.sleep(0.2)
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def one_build(name: str, spec: Any, engine: Any, stage: str = "runtime") -> dict[str, Any]:
    # The CPU image: no layer cache at all. A CUDA build stage: its compile step reruns anyway.
    cpu = stage == "runtime"
    report = pipeline.build(spec, RunOptions(no_cache=cpu, stage=stage, verify=cpu), engine=engine)
    stats = report.compile_cache
    entry = {
        "build": name,
        "tag": report.tag,
        "ok": report.ok,
        "build_seconds": round(report.build_seconds, 1),
        "compile_step_seconds": compile_step_seconds(report.log),
        "compile_seconds": {op: round(s, 1) for op, s in report.compile_seconds.items()},
        "compile_cache": None if stats is None else stats.to_json(),
    }
    print(json.dumps(entry), file=sys.stderr, flush=True)
    return entry


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="default: our CPU ops; with --cuda, transformer")
    parser.add_argument("--cuda", metavar="X.Y", help="a CUDA image's build stage from its stand-ins")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    engine = detect_engine()
    with redis_on_loopback() as url:
        if args.cuda:
            args.ops = args.ops or "transformer"
            base, stage = cuda_spec(args.cuda, args.ops), "build"
            warm_url = url.replace("127.0.0.1", "localhost")
        else:
            args.ops = args.ops or "cpu_adam,cpu_adagrad,cpu_lion,async_io"
            base, stage, warm_url = cpu_spec(args.ops, engine), "runtime", url
        tag = base.tag.split(":")[0]
        cold_spec = replace(base, compile_cache=compile_cache.parse(url), tag=f"{tag}:compile-cache-cold")
        warm_spec = replace(
            base, compile_cache=compile_cache.parse(warm_url), tag=f"{tag}:compile-cache-warm"
        )
        cold = one_build("cold", cold_spec, engine, stage)
        warm = one_build("warm", warm_spec, engine, stage)
    ratio = None
    if cold["compile_step_seconds"] and warm["compile_step_seconds"] is not None:
        ratio = round(warm["compile_step_seconds"] / cold["compile_step_seconds"], 3)
    result = {
        "engine": engine.kind,
        "target": base.target,
        "stage": stage,
        "ops": args.ops.split(","),
        "cache": "redis on loopback",
        "builds": [cold, warm],
        "warm_over_cold": ratio,
        "goal": GOAL,
        "met": ratio is not None and ratio <= GOAL,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
