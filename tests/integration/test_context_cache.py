"""The engine keeps one copy of a build context per slot, not one per build.

BuildKit stores each build's context under a key made from the context's path; staging in
a fresh temporary folder made a new copy every build (the torch wheel each time) that only a
prune removed. Measured on a real engine: the temporary-folder way grows the cache by the
context's size per build (so the measurement can fail), the slot way does not.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from imagegen.building.staging import context_slot
from imagegen.engine import build_image, detect_engine
from imagegen.engine.types import Engine

# An odd size, so this file's context copies can be told from the others the engine holds: the
# other integration tests build beside this file, and their copies grow and shrink as they do.
BLOB = 8 * 1024 * 1024 + 4099
OURS = range(BLOB, BLOB + 64 * 1024)  # the blob and the few bytes the build adds
TAG = "imagegen-it/context-cache:latest"
DOCKERFILE = """\
FROM imagegen-standin/debian:bookworm AS runtime
RUN --mount=type=bind,source=blob,target=/blob wc -c /blob
"""


def _context_records(client: Any) -> dict[str, int]:
    return {r["ID"]: r["Size"] for r in client.df().get("BuildCache") or () if r["Type"] == "source.local"}


@pytest.fixture
def engine(docker_client: Any) -> Iterator[Engine]:
    found = detect_engine()
    if found.kind == "classic":
        pytest.skip("the classic builder sends the context as a tar each time and keeps no copy")
    before = set(_context_records(docker_client))
    yield found
    made = [i for i in _context_records(docker_client) if i not in before]
    for record in made:  # only what this test made: other builds' copies stay
        docker_client.api.prune_builds(filters={"id": record})
    docker_client.images.remove(TAG, force=True)


def _our_records(client: Any) -> dict[str, int]:
    return {record: size for record, size in _context_records(client).items() if size in OURS}


def _build_in_each(engine: Engine, client: Any, contexts: list[AbstractContextManager[Path]]) -> int:
    """Bytes of this file's context copies the engine holds after the builds, each with a new
    blob, less before (a copy that is gone since, the engine's to collect, is not counted)."""
    start = _our_records(client)
    for context in contexts:
        with context as folder:
            (folder / "blob").write_bytes(os.urandom(BLOB))  # a changed wheel, say
            build_image(engine, folder, DOCKERFILE, TAG)
    return sum(size - start.get(record, 0) for record, size in _our_records(client).items())


@contextmanager
def _temporary() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="imagegen-it-context-") as tmp:
        yield Path(tmp)


def test_a_new_folder_per_build_leaves_a_copy_per_build(engine: Engine, docker_client: Any) -> None:
    grown = _build_in_each(engine, docker_client, [_temporary(), _temporary()])
    assert grown >= 2 * BLOB


def test_a_slot_leaves_one_copy_however_many_builds(
    engine: Engine, docker_client: Any, tmp_path: Path
) -> None:
    slots = tmp_path / "contexts"
    _build_in_each(engine, docker_client, [context_slot(slots)])  # the first build in this slot
    grown = _build_in_each(engine, docker_client, [context_slot(slots), context_slot(slots)])
    assert grown < BLOB // 2
