"""How long `imagegen verify --key` takes now that the proof is read from outside the image.

For a signed image (``imagegen build --sign-key``), alternates in the same run:

- the ops in the sealed container (load, self-tests, device-code audit: ``verify_image``);
- the proof read from outside (``check_image`` with the key: the engine's export of the image
  streamed, every layer hashed, the added layers judged);
- the proof as it was read before, by the image's own Python (``probe_image`` + the SBOM compare):
  the baseline, since that is what ``verify --key`` cost before the change.

Prints and saves the medians and the ratio of ``verify --key`` now (container + outside) to before
(container + probe).

    python bench/verify_key_time.py --image TAG --key pub.pem [--runs 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from _common import write_json  # noqa: E402

from imagegen.engine.client import docker_client  # noqa: E402
from imagegen.proof.compare import compare  # noqa: E402
from imagegen.proof.image_proof import check_image, probe_image, read_documents  # noqa: E402
from imagegen.proof.signing import load_public_key  # noqa: E402
from imagegen.verify.container import verify_image  # noqa: E402


def _timed(work: object) -> float:
    start = time.monotonic()
    work()  # type: ignore[operator]
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "verify_key_time.json"))
    args = parser.parse_args()
    key = load_public_key(args.key)
    client = docker_client()
    try:
        size = int(client.api.inspect_image(args.image)["Size"])
    finally:
        client.close()
    documents = read_documents(args.image)
    sbom = json.loads(documents.files["sbom.cdx.json"])

    def outside() -> None:
        check = check_image(args.image, key)
        if check is None or not check.ok:
            sys.exit(f"{args.image} failed the proof with the key: {check.summary() if check else 'no SBOM'}")

    def probe() -> None:
        compare(sbom, probe_image(args.image))

    def container() -> None:
        if not verify_image(args.image).ok:
            sys.exit(f"{args.image} failed verification")

    runs: dict[str, list[float]] = {"container": [], "outside": [], "probe": []}
    for _ in range(args.runs):
        for name, work in (("container", container), ("outside", outside), ("probe", probe)):
            runs[name].append(_timed(work))
    median = {name: statistics.median(values) for name, values in runs.items()}
    before, now = median["container"] + median["probe"], median["container"] + median["outside"]
    results = {
        "image": args.image,
        "image_bytes": size,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "runs": args.runs,
        "container_seconds_median": round(median["container"], 2),
        "outside_proof_seconds_median": round(median["outside"], 2),
        "probe_proof_seconds_median": round(median["probe"], 2),
        "verify_key_seconds_before": round(before, 2),
        "verify_key_seconds_now": round(now, 2),
        "ratio_now_to_before": round(now / before, 2),
        "outside_mib_per_second": round(size / (1 << 20) / median["outside"], 1),
        "seconds": {name: [round(v, 2) for v in values] for name, values in runs.items()},
    }
    print(
        f"verify --key {args.image} ({size / (1 << 20):.0f} MiB): now {now:.1f} s (container "
        f"{median['container']:.1f} + outside {median['outside']:.1f}), before {before:.1f} s (probe "
        f"{median['probe']:.1f}): x{results['ratio_now_to_before']}"
    )
    write_json(Path(args.out), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
