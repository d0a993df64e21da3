"""Two images of one target with different torch releases carry the same op modules, compiled once.

    python scripts/stable_abi_images.py [--cuda X.Y] [--torch A,B] [--ops OPS] [--arch LIST] [--bake]
                                        [--torch-index URL] [--ca-cert FILE] [--out FILE] [--keep]

Run with the project's venv (``make stable-abi-images``). For each torch release of ``--torch``
(default 2.14.1,2.15.0: PyPI's CUDA 13.0 and CUDA 13.2 builds, both CUDA 13, several GB each),
one after the other, ``imagegen build --cuda X.Y --standins --torch T`` of ``--ops`` (default
fused_lion,fused_adam) for ``--arch`` (default 9.0), verified, with the stable ops' headers
pinned as ``imagegen build`` pins them by default (``--stable-headers newest``: the target's newest
torch) and a compile cache (a Redis started here, empty) that counts what each build compiled.
Then, from the engine's layer folders:

1. both images built and verified, every op ``aot``, and their torch releases differ;
2. the op modules (``kernels/_ops/*.abi3.so``) are the same bytes in both images, in one layer
   with the same digest (a node holding one image pulls nothing new for the other's ops);
3. the second build compiled nothing: every translation unit a hit of the first build's.

With ``--bake``, the images come from one ``imagegen bake cudaX-Y --torch-releases A,B`` instead
(``--arch`` does not apply: a bake target's archs are the catalog's), with the compile cache the
bake chooses itself (``local``, sccache in a BuildKit cache mount, emptied first, as are the
build cache's layers: pip's downloads stay), and the checks
are the same: the bake builds the newest torch first, then the other from the cache.

Prints a summary and writes the report (JSON) to ``--out`` (default
``bench/results/stable_abi_images.json``, or ``stable_abi_bake.json`` with ``--bake``). The images
are removed afterwards unless ``--keep``; the build cache stays (``docker builder prune`` gives the
disk back: about 20 GB).

Exit status: 0 proven; 1 a check failed or a build failed; 2 bad arguments; 3 no Redis here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from packaging.version import Version  # noqa: E402

from imagegen.commands.bake import release_target  # noqa: E402
from imagegen.compat.pip_config import pip_index_url  # noqa: E402
from imagegen.engine import client as engine_client  # noqa: E402
from imagegen.engine.layer_dirs import layer_dirs, read_dir_layer  # noqa: E402
from imagegen.imagespec.compile_cache import LOCAL_DIR  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from compile_cache import redis_on_loopback  # noqa: E402  (bench/compile_cache.py's Redis)

CA_CERT = Path("/etc/ssl/certs/ca-certificates.crt")
REPOSITORY = "imagegen-stable-abi/cuda"
MODULES = "/kernels/_ops/"


def build(args: argparse.Namespace, torch: str, cache: str) -> dict[str, Any]:
    """`imagegen build` of one torch release: its JSON summary, with the seconds it took."""
    tag = f"{REPOSITORY}{args.cuda}:torch{torch}"
    argv = [
        sys.executable, "-m", "imagegen", "build", "--cuda", args.cuda, "--standins", "--torch", torch,
        "--ops", args.ops, "--arch", args.arch, "--torch-index", args.torch_index,
        "--compile-cache", cache, "--tag", tag, "--json",
    ]  # fmt: skip
    argv += ["--ca-cert", args.ca_cert] if args.ca_cert else []
    print(f"stable_abi_images: building {tag}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)  # its log on stderr
    summary: dict[str, Any] = {"tag": tag, "torch": torch, "exit": done.returncode}
    try:
        summary["build"] = json.loads(done.stdout)
    except json.JSONDecodeError:
        summary["build"] = None
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


def bake(args: argparse.Namespace, releases: Sequence[str]) -> list[dict[str, Any]]:
    """One `imagegen bake` of the target over ``releases``: each image's entry of its JSON report
    as ``build`` gives it, the newest torch first (the image that compiled)."""
    target = f"cuda{args.cuda}".replace(".", "-")
    argv = [
        sys.executable, "-m", "imagegen", "bake", target, "--standins",
        "--torch-releases", ",".join(releases), "--ops", args.ops,
        "--torch-index", args.torch_index, "--json",
    ]  # fmt: skip
    argv += ["--ca-cert", args.ca_cert] if args.ca_cert else []
    print(f"stable_abi_images: baking {target} over torch {', '.join(releases)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)  # its log on stderr
    seconds = round(time.monotonic() - started, 1)
    try:
        entries = {entry["target"]: entry for entry in json.loads(done.stdout)["images"]}
    except (json.JSONDecodeError, KeyError, TypeError):
        entries = {}
    images = []
    for torch in sorted(releases, key=Version, reverse=True):
        entry = entries.get(release_target(target, torch))
        ok = entry is not None and entry.get("ok")
        tag = entry["tag"] if entry else f"(no image of torch {torch})"
        exit_status = 0 if ok else done.returncode or 1
        took = entry.get("build_seconds") if entry else seconds
        images.append({"tag": tag, "torch": torch, "exit": exit_status, "build": entry, "seconds": took})
    return images


def empty_local_cache(client: Any) -> None:
    """Remove the build cache's layers and the cache mount that ``--compile-cache local`` compiles
    into, so that the bake's first image compiles everything and the count means something (with
    its layers cached, a build compiles nothing at all). The other cache mounts stay: pip's
    downloads of torch, for one."""
    client.api.prune_builds(filters={"type": "regular"}, all=True)
    for record in client.df().get("BuildCache") or ():
        mount = record["Type"] == "exec.cachemount"
        if mount and record["Description"].startswith(f"cached mount {LOCAL_DIR} "):
            client.api.prune_builds(filters={"id": record["ID"]})


def op_modules(client: Any, tag: str) -> dict[str, Any]:
    """The layers of ``tag`` that hold op modules: {diff_id: {path: sha256}}."""
    info = client.api.inspect_image(tag)
    folders = layer_dirs(info)
    if folders is None:
        raise SystemExit("stable_abi_images: the engine here keeps no overlay2 layer folders to read")
    found: dict[str, Any] = {}
    for diff_id, folder in zip(info["RootFS"]["Layers"], folders, strict=True):
        layer = read_dir_layer(diff_id, folder, lambda path: MODULES in path, lambda _: False)
        modules = {e.path: e.sha256 for e in layer.entries if e.kind == "file" and MODULES in e.path}
        if any(path.endswith(".so") for path in modules):
            found[diff_id] = modules
    return found


def judge(first: dict[str, Any], second: dict[str, Any]) -> list[str]:
    """What failed, in words (empty: proven)."""
    failed = []
    for image in (first, second):
        summary = image["build"]
        if image["exit"] != 0 or summary is None or not summary.get("ok"):
            failed.append(f"{image['tag']}: the build or its verification failed (exit {image['exit']})")
            continue
        sources = {op["name"]: op["source"] for op in summary["verify"]["ops"]}
        if set(sources.values()) != {"aot"}:
            failed.append(f"{image['tag']}: not every op loaded ahead of time: {sources}")
    if failed:
        return failed
    if first["torch"] == second["torch"]:
        failed.append("the two images have the same torch release")
    if not any(path.endswith(".abi3.so") for layer in first["modules"].values() for path in layer):
        failed.append(f"{first['tag']} holds no stable (.abi3.so) op module")
    elif first["modules"] != second["modules"]:
        failed.append("the op modules' layers differ: " + json.dumps([first["modules"], second["modules"]]))
    cache = second["build"].get("compile_cache") or {}
    compiled = (first["build"].get("compile_cache") or {}).get("misses", 0)
    if not cache or cache.get("misses") != 0 or cache.get("hits") != compiled or not compiled:
        failed.append(
            f"the second build compiled again: {cache.get('misses')} misses, {cache.get('hits')} hits "
            f"(the first compiled {compiled})"
        )
    return failed


def _reported(image: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = image["build"] or {}
    verified: dict[str, Any] = summary.get("verify") or {}
    return {
        "tag": image["tag"],
        "torch": image["torch"],
        "torch_installed": summary.get("torch"),
        "seconds": image["seconds"],
        "compile_cache": summary.get("compile_cache"),
        "verify": [(op["name"], op["source"]) for op in verified.get("ops", [])],
        "modules": image["modules"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cuda", default="13.0", help="the CUDA target (default 13.0)")
    parser.add_argument("--torch", default="2.14.1,2.15.0", help="two torch releases of the target")
    parser.add_argument("--ops", default="fused_lion,fused_adam", help="the ops (default %(default)s)")
    parser.add_argument("--arch", default="9.0", help="the CUDA arch list (default 9.0)")
    parser.add_argument("--torch-index", default=None, help="torch's index (default: the one pip uses here)")
    parser.add_argument("--ca-cert", default=str(CA_CERT) if CA_CERT.exists() else None)
    parser.add_argument("--bake", action="store_true", help="one imagegen bake of both releases")
    parser.add_argument("--out", type=Path, default=None, help="the report (default under bench/results)")
    parser.add_argument("--keep", action="store_true", help="keep the two images")
    args = parser.parse_args(argv)
    name = "stable_abi_bake.json" if args.bake else "stable_abi_images.json"
    args.out = args.out or ROOT / "bench" / "results" / name
    releases = [t.strip() for t in args.torch.split(",") if t.strip()]
    if len(releases) != 2:
        parser.error(f"--torch names two releases, like 2.14.1,2.15.0; got {args.torch!r}")
    if args.torch_index is None:
        try:
            args.torch_index = pip_index_url()
        except ValueError as exc:
            parser.error(f"{exc}; name an http(s) index with --torch-index")
    client = engine_client.docker_client(timeout=300)
    if args.bake:
        empty_local_cache(client)
        images = bake(args, releases)
    else:
        try:
            with redis_on_loopback() as cache:
                images = [build(args, torch, cache) for torch in releases]
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            client.close()
            return 3
    try:
        for image in images:
            image["modules"] = op_modules(client, image["tag"]) if image["exit"] == 0 else {}
        failed = judge(*images)
        if not args.keep:
            for image in images:
                try:
                    client.images.remove(image["tag"], force=True)
                except Exception as exc:  # not made, when its build failed
                    print(f"stable_abi_images: {image['tag']} not removed: {exc}", file=sys.stderr)
    finally:
        client.close()
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "cuda": args.cuda, "ops": args.ops, "arch": "the catalog's" if args.bake else args.arch,
        "how": "imagegen bake --torch-releases" if args.bake else "imagegen build, one after the other",
        "ok": not failed, "failed": failed,
        "images": [_reported(image) for image in images],
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for made in report["images"]:
        counted: dict[str, Any] = made["compile_cache"] or {}
        print(
            f"torch {made['torch']}: {made['seconds']:.0f} s; compiled {counted.get('misses')}, "
            f"from the cache {counted.get('hits')}; op module layers {sorted(made['modules'])}"
        )
    print("stable_abi_images: " + ("proven" if not failed else "FAILED: " + "; ".join(failed)))
    print(f"report: {args.out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
