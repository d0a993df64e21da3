"""The Python steps of ``scripts/gpu_proof.sh``, run with the Python it tests.

    python scripts/gpu_proof.py env        # python, torch, its CUDA, the GPU and its capability
    python scripts/gpu_proof.py load OP    # JIT-build (or load) one op from this checkout, timed
    python scripts/gpu_proof.py preflight [--op OP] [--work DIR]
                                           # the op ahead of time for this GPU and for another
                                           # major, each installed alone: preflight must pass the
                                           # first and refuse the second, naming the GPU

Exit status: 0 on success; 1 when torch sees no CUDA GPU (env, preflight), or preflight did not
judge the two builds as it must; op_builder's exit code when the op does not load (1 failed,
2 bad input; its message and hint, a traceback only with OP_BUILDER_DEBUG=1); 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def describe_env() -> int:
    import torch

    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU", file=sys.stderr)
        return 1
    print(
        "python",
        sys.version.split()[0],
        "torch",
        torch.__version__,
        "cuda",
        torch.version.cuda,
        torch.cuda.get_device_name(),
        torch.cuda.get_device_capability(),
    )
    return 0


def load(op: str) -> int:
    from op_builder import UserFacingError, get_builder, settings

    start = time.time()
    try:
        get_builder(op).load()
    except UserFacingError as exc:
        if os.environ.get(settings.DEBUG.name) == "1":
            raise
        print(f"{op}: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    print(f"{op} loaded in {time.time() - start:.1f}s")
    return 0


def other_major(capability: tuple[int, int]) -> str:
    """An arch whose SASS cannot run on a GPU of ``capability`` (SASS runs only within its major)."""
    return "8.0" if capability[0] != 8 else "9.0"


def judge(op: str, expect_ok: bool, returncode: int, report: Mapping[str, Any], gpu: str) -> str | None:
    """Why preflight's answer for one build is wrong, or None when it is what it must be: exit 0
    with ``op`` ok for the GPU's own arch; exit 1 with ``op`` refused, naming the GPU, otherwise."""
    entries = [entry for entry in report.get("ops", []) if entry.get("name") == op]
    if len(entries) != 1:
        return f"preflight listed {op} {len(entries)} times, not once"
    entry = entries[0]
    if expect_ok:
        if returncode != 0 or not entry["ok"]:
            return f"refused a build for this GPU (exit {returncode}): {entry['reason']}"
        return None
    if returncode != 1 or entry["ok"]:
        return f"passed a build with no code for this GPU (exit {returncode}): {entry['reason']}"
    if gpu not in entry["reason"]:
        return f"refused it without naming the GPU {gpu!r}: {entry['reason']}"
    return None


def _build_and_check(op: str, archs: str, expect_ok: bool, work: Path, gpu: str) -> tuple[bool, str]:
    """Whether preflight judged the build as it must, and what to print (the builds run at once)."""
    repo = Path(__file__).resolve().parent.parent
    dest = work / archs.replace(".", "")
    shutil.rmtree(dest, ignore_errors=True)  # a rerun starts afresh
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH", "TORCH_CUDA_ARCH_LIST"))
    }
    build_env = {**clean, "DS_BUILD_OPS": "0", f"DS_BUILD_{op.upper()}": "1", "TORCH_CUDA_ARCH_LIST": archs}
    pip = [sys.executable, "-m", "pip", "-q"]
    start = time.time()
    wheels = dest / "wheel"
    # Each build from its own copy of the sources: nothing compiled for one arch list is reused
    # for the other (the checkout's build/ holds whatever was built there last).
    from imagegen.building.build_inputs import copy_build_inputs

    source = copy_build_inputs(repo, dest / "src")
    built = subprocess.run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(wheels), str(source)],
        env=build_env,
        capture_output=True,
        text=True,
    )
    installed = built
    if built.returncode == 0:  # the wheel's name is known only once it is built
        target = [*pip, "install", "--no-deps", "--target", str(dest / "site")]
        installed = subprocess.run(
            [*target, *map(str, wheels.glob("*.whl"))], env=clean, capture_output=True, text=True
        )
    if installed.returncode != 0:
        what = "building the wheel" if installed is built else "installing the wheel"
        return False, f"{op} for {archs}: {what} failed:\n{(installed.stdout + installed.stderr)[-2000:]}"
    # Run from the work folder with only the install on the path: the checkout must not answer.
    done = subprocess.run(
        [sys.executable, "-m", "op_builder", "preflight", "--json"],
        env={**clean, "PYTHONPATH": str(dest / "site")},
        cwd=work,
        capture_output=True,
        text=True,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = done.stderr[-1000:]
        return False, f"{op} for {archs}: no JSON from preflight (exit {done.returncode}): {tail}"
    (dest / "preflight.json").write_text(done.stdout)
    problem = judge(op, expect_ok, done.returncode, report, gpu)
    verdict = "as it must" if problem is None else f"WRONG: {problem}"
    took = time.time() - start
    lines = [f"{op} built for {archs} in {took:.0f}s; preflight exit {done.returncode}, {verdict}"]
    for entry in report.get("ops", []):
        lines.append(f"  {entry['name']}: {'ok' if entry['ok'] else 'refused'}: {entry['reason']}")
    return problem is None, "\n".join(lines)


def preflight(op: str, work: Path) -> int:
    import torch

    if not torch.cuda.is_available():
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU", file=sys.stderr)
        return 1
    capability = torch.cuda.get_device_capability()
    gpu = torch.cuda.get_device_name()
    work.mkdir(parents=True, exist_ok=True)
    # Both builds at once: each is mostly one long nvcc compile, and the GPU machine has the cores.
    with ThreadPoolExecutor(max_workers=2) as pool:
        own = pool.submit(_build_and_check, op, "{}.{}".format(*capability), True, work, gpu)
        other = pool.submit(_build_and_check, op, other_major(capability), False, work, gpu)
        results = [own.result(), other.result()]
    for _, text in results:
        print(text, flush=True)
    return 0 if all(ok for ok, _ in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("env", help="python, torch, its CUDA, the GPU and its capability")
    load_step = steps.add_parser("load", help="JIT-build (or load) one op, timed")
    load_step.add_argument("op")
    check = steps.add_parser(
        "preflight", help="an op built for this GPU and for another: preflight's verdicts"
    )
    check.add_argument("--op", default="transformer")
    check.add_argument("--work", type=Path, default=Path("build/gpu-proof-preflight"))
    args = parser.parse_args(argv)
    if args.step == "preflight":
        return preflight(args.op, args.work.resolve())
    return describe_env() if args.step == "env" else load(args.op)


if __name__ == "__main__":
    sys.exit(main())
