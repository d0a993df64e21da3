"""`imagegen standins` against the real engine: a no-op when every stand-in is current, and it
makes what is missing (only that), with the CA mounted for apt and left out of the image.

The images are the session's CPU stand-ins tagged under a prefix of this test's own
(STANDIN_PREFIX), so the tags other builds use are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from imagegen import catalog
from imagegen.standins.plan import REVISION, REVISION_KEY
from tests.integration.conftest import REPO, run_in

PREFIX = "imagegen-it-standin"
OURS = [
    f"{catalog.STANDIN_PREFIX}/debian:{catalog.STANDIN_DISTRO}",
    catalog.STANDIN_DEVEL,
    catalog.STANDIN_RUNTIME,
]
COPIES = [PREFIX + tag.removeprefix(catalog.STANDIN_PREFIX) for tag in OURS]


def standins(*args: str) -> dict[str, Any]:
    env = {**os.environ, "STANDIN_PREFIX": PREFIX, "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "imagegen", "standins", "--json", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    sys.stderr.write(done.stderr[-5000:])
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture
def copies(docker_client: Any) -> Iterator[None]:
    for source, copy in zip(OURS, COPIES):
        docker_client.images.get(source).tag(copy)
    yield
    for copy in COPIES:
        with contextlib.suppress(docker.errors.ImageNotFound):  # the test removed it
            docker_client.images.remove(copy)


def test_current_images_are_left_alone_and_a_missing_one_is_made(docker_client: Any, copies: None) -> None:
    report = standins()
    assert [(i["tag"], i["action"]) for i in report["images"]] == [(t, "current") for t in COPIES]
    assert report["seconds"] < 30  # asks the engine only

    runtime = COPIES[2]
    before = docker_client.images.get(COPIES[1]).id
    docker_client.images.remove(runtime)
    report = standins()
    assert [(i["tag"], i["action"]) for i in report["images"]] == [
        (COPIES[0], "current"),
        (COPIES[1], "current"),
        (runtime, "built"),
    ]
    assert docker_client.images.get(COPIES[1]).id == before  # the devel image was not touched
    made = docker_client.images.get(runtime)
    labels = made.labels
    assert labels["io.imagegen.standin"] == "runtime" and labels[REVISION_KEY] == REVISION
    # apt's environment stays in the recipe, not in the image's (images built on it inherit that).
    assert not [e for e in made.attrs["Config"]["Env"] if e.startswith("DEBIAN_FRONTEND=")]
    # The CA was mounted for apt: at most the empty mount point is left, none of its bytes.
    script = "python3 --version; echo ca=$(cat /run/host-ca.crt 2>/dev/null | wc -c); command -v g++ || true"
    code, out = run_in(docker_client, runtime, ["sh", "-c", script])
    assert code == 0 and "Python 3.11" in out and "ca=0" in out and "g++" not in out, out
