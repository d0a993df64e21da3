"""What an update costs a node: the bytes it must pull to go from image A to image A'.

    python bench/update_pull.py [--imagegen-root DIR] [--label NAME] [--cases a,b] [--out FILE]
                                [--cuda X.Y [--arch LIST] [--torch X.Y.Z] [--torch-index URL]]

Builds CPU image pairs from the stand-in bases (torch from the local wheelhouse), or with
``--cuda`` CUDA image pairs of the fused optimizers from the CUDA stand-ins (`imagegen standins
--cuda X.Y`; torch's CUDA build from the index pip installs from, as `make image-cuda`), with the
imagegen of ``--imagegen-root`` (default: this checkout; an older checkout, e.g. a `git worktree`
of an earlier commit, measures the layout before), pushes each to a throwaway local
`docker-registry`, and reads from the registry's manifests the compressed bytes of A' that A does
not already have (layers by digest, as a node's engine skips the blobs it holds):

- ``op-change``: A, then the same with one line added to one op's source (a comment in cpu_lion;
  CUDA: in fused_lion's kernel);
- ``op-added``: cpu_adam, then cpu_adam and cpu_lion (CUDA: fused_adam, then with fused_lion);
- ``cold-rebuild``: A, then the same commit rebuilt after `docker builder prune` (a cold cache).

Prints a table and writes ``bench/results/update_pull_<label>.json``. Needs Docker, the stand-ins
(`imagegen standins`) and Debian's docker-registry (scripts/system-deps.sh installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from _common import RESULTS, write_json  # noqa: E402

WHEELHOUSE = os.environ.get("IMAGEGEN_BENCH_WHEELHOUSE", "/opt/wheels")
CA_CERT = os.environ.get("IMAGEGEN_BENCH_CA_CERT", "/etc/ssl/certs/ca-certificates.crt")
CASES = ("op-change", "op-added", "cold-rebuild")
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """Debian's docker-registry on a loopback port, its storage in a temporary folder."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("docker-registry") or shutil.which("registry")
        if binary is None:
            sys.exit("no docker-registry binary: bash scripts/system-deps.sh installs Debian's")
        self.address = f"127.0.0.1:{_free_port()}"
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
            f"http:\n  addr: {self.address}\n"
        )
        self.process = subprocess.Popen(
            [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                sys.exit("the local registry did not start")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def layers(self, repository: str, tag: str) -> list[dict[str, Any]]:
        request = urllib.request.Request(
            f"http://{self.address}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return list(json.loads(response.read())["layers"])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@dataclass(frozen=True)
class Target:
    """What the pairs are built for: the CPU, or a CUDA release with its torch and arch list."""

    target: list[str]  # imagegen build's target and torch options
    ops: tuple[str, str]  # the op set, and the same with one op more
    changed: str  # the source file the op-change case adds a line to

    @classmethod
    def cpu(cls) -> Target:
        return cls(
            ["--cpu", "--wheelhouse", WHEELHOUSE],
            ("cpu_adam", "cpu_adam,cpu_lion"),
            "kernels/optim/csrc/cpu_lion.cpp",
        )

    @classmethod
    def cuda(cls, version: str, arch: str, torch: str, index: str) -> Target:
        return cls(
            ["--cuda", version, "--arch", arch, "--torch", torch, "--torch-index", index],
            ("fused_adam", "fused_adam,fused_lion"),
            "kernels/optim/csrc/fused_lion.cu",
        )


def build(root: Path, target: Target, tag: str, ops: str, source: Path | None = None) -> float:
    """Build ``tag`` with the imagegen of ``root``; the seconds it took."""
    command = [
        sys.executable, "-m", "imagegen", "build", *target.target, "--ops", ops, "--standins",
        "--ca-cert", CA_CERT, "--tag", tag, "--no-verify",
        *(["--source", str(source)] if source is not None else []),
    ]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(
        command, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"building {tag} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def push(registry: Registry, tag: str, name: str) -> list[dict[str, Any]]:
    remote = f"{registry.address}/bench/{name}"
    subprocess.run(["docker", "tag", tag, remote], check=True)
    done = subprocess.run(["docker", "push", "--quiet", remote], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pushing {tag} failed:\n{done.stderr[-3000:]}")
    return registry.layers("bench/" + name.split(":")[0], name.split(":")[1])


def changed_source(root: Path, folder: Path, changed: str) -> Path:
    """A copy of ``root``'s build inputs with a comment added to the source ``changed``."""
    copy = folder / "checkout"
    copy.mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml", "README.md", "op_builder", "kernels", "imagegen"):
        src = root / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
        else:
            shutil.copy2(src, copy / name)
    source = copy / changed
    source.write_text(source.read_text() + f"\n// a one-line change {uuid.uuid4().hex}\n")
    return copy


def new_bytes(held: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> int:
    have = {layer["digest"] for layer in held}
    return sum(int(layer["size"]) for layer in wanted if layer["digest"] not in have)


def run_case(case: str, root: Path, target: Target, registry: Registry, work: Path) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    first, second = f"bench-update/{case}:a-{run}", f"bench-update/{case}:b-{run}"
    fewer, more = target.ops
    ops = fewer if case == "op-added" else more
    build(root, target, first, ops)
    if case == "op-change":
        build(root, target, second, ops, changed_source(root, work / case, target.changed))
    elif case == "op-added":
        build(root, target, second, more)
    else:
        subprocess.run(["docker", "builder", "prune", "-af"], check=True, capture_output=True)
        build(root, target, second, ops)
    before, after = push(registry, first, f"{case}:a"), push(registry, second, f"{case}:b")
    total = sum(int(layer["size"]) for layer in after)
    new = new_bytes(before, after)
    same = [a["digest"] == b["digest"] for a, b in zip(before, after)] if len(before) == len(after) else []
    for tag in (first, second, f"{registry.address}/bench/{case}:a", f"{registry.address}/bench/{case}:b"):
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    return {
        "case": case,
        "layers": len(after),
        "pushed_bytes": total,
        "new_bytes": new,
        "new_share": new / total if total else 0.0,
        "same_layers": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--imagegen-root", type=Path, default=REPO, help="the checkout whose imagegen builds")
    parser.add_argument("--label", default="after", help="names the results file (before, after)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cuda", help="CUDA image pairs of this CUDA release's stand-ins (default: CPU)")
    parser.add_argument("--arch", default="9.0", help="with --cuda: the arch list (default 9.0)")
    parser.add_argument("--torch", default="2.15.0", help="with --cuda: torch's release (default 2.15.0)")
    parser.add_argument("--torch-index", help="with --cuda: torch's index (default: pip's own)")
    args = parser.parse_args()
    target = Target.cpu()
    if args.cuda:
        sys.path.insert(0, str(REPO))
        from imagegen.compat.pip_config import pip_index_url

        target = Target.cuda(args.cuda, args.arch, args.torch, args.torch_index or pip_index_url())
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        sys.exit(f"unknown case {unknown[0]}: one of {', '.join(CASES)}")
    root = args.imagegen_root.resolve()
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    with tempfile.TemporaryDirectory(prefix="bench-update-") as tmp:
        registry = Registry(Path(tmp))
        try:
            results = [run_case(case, root, target, registry, Path(tmp)) for case in cases]
        finally:
            registry.close()
    print(f"{'case':<14} {'layers':>6} {'image (gzip)':>14} {'new to a node':>14} {'share':>7}")
    for r in results:
        print(f"{r['case']:<14} {r['layers']:>6} {r['pushed_bytes'] / 2**20:>10.1f} MiB "
              f"{r['new_bytes'] / 2**20:>10.1f} MiB {100 * r['new_share']:>6.1f}%")  # fmt: skip
    out = args.out or RESULTS / f"update_pull_{args.label}{'_cuda' if args.cuda else ''}.json"
    image = f"cuda{args.cuda} (arch {args.arch}, torch {args.torch})" if args.cuda else "cpu"
    summary = {"label": args.label, "commit": commit.stdout.strip(), "image": image, "results": results}
    write_json(out, summary)


if __name__ == "__main__":
    main()
