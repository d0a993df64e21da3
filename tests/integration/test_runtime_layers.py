"""Runtime images in layers by how often they change, on real builds of the CPU image.

Three images of one target, each the session's (tests/integration/conftest.py): the CPU ops; the
same with one op's source changed by a comment (what a user's op change is); other ops (cpu_adam
beside an op package's op). What a node that holds the first must pull for another is the bytes
of the layers it does not hold, read here from the engine's layer folders (sizes of the files
each layer holds)."""

from __future__ import annotations

from typing import Any

import pytest

from imagegen.engine.layer_dirs import layer_dirs, read_dir_layer
from tests.integration.conftest import CHANGED_TAG, CPU_TAG, OP_PACKAGE_TAG, ChangedImage

pytestmark = [pytest.mark.docker, pytest.mark.timeout(2400)]

CHANGED = CHANGED_TAG
OTHER = OP_PACKAGE_TAG


def _layers(client: Any, tag: str) -> list[tuple[str, int]]:
    """Each layer of ``tag``, bottom first, and the bytes of the files it holds."""
    info = client.api.inspect_image(tag)
    folders = layer_dirs(info)
    assert folders is not None, "the engine here keeps overlay2 layer folders"
    found = []
    for diff_id, folder in zip(info["RootFS"]["Layers"], folders, strict=True):
        layer = read_dir_layer(diff_id, folder, lambda _: False, lambda _: False)
        found.append((diff_id, sum(e.size for e in layer.entries if e.kind == "file")))
    return found


def _new_bytes(held: list[tuple[str, int]], wanted: list[tuple[str, int]]) -> int:
    have = {diff_id for diff_id, _ in held}
    return sum(size for diff_id, size in wanted if diff_id not in have)


@pytest.fixture(scope="module")
def images(
    cpu_image: dict[str, Any],
    changed_cpu_image: ChangedImage,
    op_package_image: dict[str, Any],
    docker_client: Any,
) -> dict[str, Any]:
    return {tag: _layers(docker_client, tag) for tag in (CPU_TAG, changed_cpu_image.tag, OTHER)}


def test_the_dependencies_are_one_large_layer_every_image_of_the_target_shares(
    images: dict[str, Any],
) -> None:
    largest = {tag: max(layers, key=lambda layer: layer[1]) for tag, layers in images.items()}
    assert len({diff_id for diff_id, _ in largest.values()}) == 1, largest  # the same bytes
    diff_id, size = largest[CPU_TAG]
    total = sum(s for _, s in images[CPU_TAG])
    assert size > total / 2  # torch and NumPy: most of the image
    # Ours sits right above it, small.
    layers = images[CPU_TAG]
    ours = layers[[d for d, _ in layers].index(diff_id) + 1]
    assert ours[1] < total / 50, ours


def test_an_op_change_is_megabytes_to_pull(images: dict[str, Any]) -> None:
    total = sum(size for _, size in images[CHANGED])
    new = _new_bytes(images[CPU_TAG], images[CHANGED])
    assert 0 < new <= total / 10, (new, total)
    # Only what sits above the dependencies is new.
    ids = [d for d, _ in images[CHANGED]]
    deps = ids.index(max(images[CHANGED], key=lambda layer: layer[1])[0])
    assert ids[: deps + 1] == [d for d, _ in images[CPU_TAG]][: deps + 1]


def test_images_of_other_ops_share_nearly_every_byte(images: dict[str, Any]) -> None:
    total = sum(size for _, size in images[OTHER])
    shared = total - _new_bytes(images[CPU_TAG], images[OTHER])
    assert shared >= 0.95 * total, (shared, total)
