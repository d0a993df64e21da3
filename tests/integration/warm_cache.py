"""Build the integration tier's CPU image ahead of its tests, unverified, so that the engine's
cache holds its stages (the stand-in with torch installed, the compiled ops) when they start.

    python -m tests.integration.warm_cache

``.ci/run`` runs it in the background while the lint and the compat sample run, which keep about
one core busy each: the image's first build is then done by the time the tests need it, and the
tests that build it (``conftest.cpu_image`` and the builds alike) find every stage cached, as on a
machine that ran them before. The image is built with exactly the tests' arguments
(``conftest.build_args``) under a tag of its own, which is removed again: only the cache stays.
Exit status: imagegen's.
"""

from __future__ import annotations

import sys
import time

from imagegen.engine import client as engine_client
from tests.integration.conftest import build_args, imagegen, remove_image

WARM_TAG = "imagegen-it/warm-cache:1"


def main() -> int:
    started = time.monotonic()
    result = imagegen(*build_args(WARM_TAG), "--no-verify")
    client = engine_client.docker_client()
    try:
        remove_image(client, WARM_TAG)  # the tag alone goes: the cache is what stays
    finally:
        client.close()
    verdict = "built" if result.returncode == 0 else f"failed (exit {result.returncode})"
    print(f"warm_cache: the integration tier's CPU image {verdict} in {time.monotonic() - started:.0f} s")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
