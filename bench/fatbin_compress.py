"""What ``-compress-mode=size`` saves on one GPU op's module, against nvcc's default and no compression.

    python bench/fatbin_compress.py [--op transformer] [--archs "7.5;8.0;...;12.0+PTX"]
                                    [--modes default,size,none] [--out bench/results/fatbin_compress.json]

The op's ``.cu`` sources are compiled with the local nvcc and exactly the flags op_builder gives
them (``DS_ACCELERATOR=cuda``, the arch list; default: the CUDA 13.0 image's, from
``op_builder.archs.default_cuda_archs``), once per mode, in the same run, plus
``-compress-mode=<mode>``; the objects are linked into one shared module as a build links them
(the binding's ``.cpp`` is left out: it needs a CUDA build of torch and holds no device code). Each
module's size and its device code per entry are read with ``imagegen.proof.size_probe`` (what
``imagegen size`` reports), and the compile time of each mode is kept. No GPU is needed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import RESULTS, write_json  # noqa: E402
from parallel_compile import machine  # noqa: E402

from imagegen.proof.size import arch_key, format_bytes  # noqa: E402
from imagegen.proof.size_probe import device_bytes  # noqa: E402
from op_builder import ALL_OPS  # noqa: E402
from op_builder.archs import default_cuda_archs  # noqa: E402
from op_builder.context import resolve_context  # noqa: E402
from op_builder.toolchain import probe  # noqa: E402


def _spell(arch: Any) -> str:
    return f"{arch.major}.{arch.minor}{arch.suffix}{'+PTX' if arch.ptx else ''}"


def build_module(op: str, archs: str, mode: str, out: Path) -> tuple[str, float]:
    """(nvcc version, seconds): ``out`` linked from ``op``'s .cu sources compiled with ``mode``."""
    env = {**os.environ, "DS_ACCELERATOR": "cuda", "TORCH_CUDA_ARCH_LIST": archs}
    ctx = resolve_context(env, probe(env))
    if ctx.toolchain.cuda is None:
        raise SystemExit("no CUDA toolkit found (nvcc not on PATH, CUDA_HOME unset)")
    flags = ALL_OPS[op].flags(ctx)
    objects: list[str] = []
    start = time.monotonic()
    for source in (s for s in flags.sources if s.endswith(".cu")):
        obj = out.parent / f"{mode}-{Path(source).stem}.o"
        command = [ctx.toolchain.cuda.nvcc, *flags.device, f"-compress-mode={mode}"]
        command += [*(f"-I{d}" for d in flags.include_dirs), "-c", source, "-o", str(obj)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{source} failed:\n{' '.join(command)}\n{(done.stdout + done.stderr)[-3000:]}")
        objects.append(str(obj))
    seconds = time.monotonic() - start
    cxx = shutil.which("g++") or "c++"
    subprocess.run([cxx, "-shared", "-o", str(out), *objects], check=True)
    return ctx.toolchain.cuda.version, seconds


def main() -> int:
    default_archs = ";".join(_spell(a) for a in default_cuda_archs("13.0"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="transformer", help="a GPU op")
    parser.add_argument("--archs", default=default_archs, help="TORCH_CUDA_ARCH_LIST for every mode")
    parser.add_argument("--modes", default="default,size,none", help="nvcc -compress-mode values")
    parser.add_argument("--out", default=str(RESULTS / "fatbin_compress.json"))
    args = parser.parse_args()

    before = machine()
    rows: list[dict[str, Any]] = []
    nvcc = ""
    with tempfile.TemporaryDirectory(prefix="imagegen-fatbin-compress-") as tmp:
        for mode in args.modes.split(","):
            module = Path(tmp) / f"{args.op}-{mode}.so"
            nvcc, seconds = build_module(args.op, args.archs, mode, module)
            entries = device_bytes(str(module))
            device = sum(entries.values())
            rows.append({
                "mode": mode,
                "module_bytes": module.stat().st_size,
                "device_bytes": device,
                "compile_seconds": round(seconds, 1),
                "entries": dict(sorted(entries.items(), key=lambda item: arch_key(item[0]))),
            })  # fmt: skip
            print(
                f"{mode:8} module {format_bytes(module.stat().st_size):>10}, device code "
                f"{format_bytes(device):>10} in {len(entries)} entries, compiled in {seconds:.1f}s"
            )
    first = rows[0]
    for row in rows:
        row["module_vs_first"] = round(row["module_bytes"] / first["module_bytes"], 3)
        row["device_vs_first"] = round(row["device_bytes"] / first["device_bytes"], 3)
    write_json(
        Path(args.out),
        {"machine": before, "nvcc": nvcc, "op": args.op, "archs": args.archs, "rows": rows},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
