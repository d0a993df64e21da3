"""Both readers of an image's layers read each tar member the way the engine applies it.

Each case is a layer made by hand with tarfile (names with ``..``, ``.`` and doubled slashes, a
folder the layer holds files in but lists no entry for, hard links, whiteouts and opaque folders,
odd modes and owners), stacked on a base into one image that the engine itself loads: the engine
applies each layer into its overlay2 folder. The layer-folder reader reads what the engine wrote;
the export reader reads the tar the engine hands back (``docker save`` gives the loaded tar back
byte for byte). Both must give the entries written out here by hand, from the rules of moby's
``UnpackLayer``, not from either reader."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from imagegen.engine.layer_dirs import layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, LayerEntry, image_layers
from tests.integration.hand_layers import Member, file, folder, hardlink, image_archive, layer_tar, symlink

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

ROOT = (0o755, 0, 0)  # what the engine makes a folder the layer leaves out as


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BASE = [folder("keep/"), file("keep/a.py"), folder("gone/"), file("gone/x.py"), file("gone.py"),
        folder("base/"), file("base/old.py")]  # fmt: skip

# (case, the layer's members, the entries it must read as: (path, kind, (mode, uid, gid), extra)
# where extra is a file's sha256 or a link's target).
CASES: list[tuple[str, list[Member], set[tuple[Any, ...]]]] = [
    ("dot-dot", [file("usr/../opt/x.pth", b"import os\n")],
     {("/opt", "dir", ROOT, None), ("/opt/x.pth", "file", (0o644, 0, 0), _sha(b"import os\n"))}),
    ("dots and slashes", [file("./a//b/./c.py", b"c")],
     {("/a", "dir", ROOT, None), ("/a/b", "dir", ROOT, None),
      ("/a/b/c.py", "file", (0o644, 0, 0), _sha(b"c"))}),
    ("a trailing slash and a mode", [folder("d/", mode=0o700), file("d/f", b"f")],
     {("/d", "dir", (0o700, 0, 0), None), ("/d/f", "file", (0o644, 0, 0), _sha(b"f"))}),
    ("folders left out", [file("deep/er/f.py", b"deep")],
     {("/deep", "dir", ROOT, None), ("/deep/er", "dir", ROOT, None),
      ("/deep/er/f.py", "file", (0o644, 0, 0), _sha(b"deep"))}),
    # The engine applies each link's own mode and owner to the file every name shares: the last wins.
    ("hard links", [folder("h/"), file("h/orig.py", b"orig", mode=0o755), hardlink("h/link.py", "h/orig.py"),
                    hardlink("h/link2.py", "./h/../h//orig.py")],
     {("/h", "dir", ROOT, None), ("/h/orig.py", "file", (0o644, 0, 0), _sha(b"orig")),
      ("/h/link.py", "file", (0o644, 0, 0), _sha(b"orig")),
      ("/h/link2.py", "file", (0o644, 0, 0), _sha(b"orig"))}),
    ("a whiteout", [file("gone/.wh.x.py", b"")],
     {("/gone", "dir", ROOT, None), ("/gone/x.py", "whiteout", None, None)}),
    ("a whiteout at the top", [file(".wh.gone.py", b"")], {("/gone.py", "whiteout", None, None)}),
    ("an opaque folder", [folder("base/"), file("base/.wh..wh..opq", b""), file("base/new.py", b"n")],
     {("/base", "dir", ROOT, None), ("/base", "opaque", None, None),
      ("/base/new.py", "file", (0o644, 0, 0), _sha(b"n"))}),
    ("an opaque folder left out", [file("keep/.wh..wh..opq", b""), file("keep/b.py", b"b")],
     {("/keep", "dir", ROOT, None), ("/keep", "opaque", None, None),
      ("/keep/b.py", "file", (0o644, 0, 0), _sha(b"b"))}),
    ("modes and owners", [folder("ww/", mode=0o777), file("ww/s", b"s", mode=0o4755, uid=1000, gid=1001),
                          folder("own/", uid=10001, gid=10001)],
     {("/ww", "dir", (0o777, 0, 0), None), ("/ww/s", "file", (0o4755, 1000, 1001), _sha(b"s")),
      ("/own", "dir", (0o755, 10001, 10001), None)}),
    ("a symbolic link", [symlink("s", "keep"), symlink("deep2/abs", "/opt/venv")],
     {("/s", "symlink", (0o777, 0, 0), "keep"), ("/deep2", "dir", ROOT, None),
      ("/deep2/abs", "symlink", (0o777, 0, 0), "/opt/venv")}),
]  # fmt: skip


def _shape(entry: LayerEntry) -> tuple[Any, ...]:
    owner = None if entry.kind in ("whiteout", "opaque") else (entry.mode, entry.uid, entry.gid)
    extra = entry.sha256 if entry.kind == "file" else entry.target if entry.kind == "symlink" else None
    return (entry.path, entry.kind, owner, extra)


@pytest.fixture(scope="module")
def loaded(docker_client: Any) -> Iterator[dict[str, Any]]:
    tag = f"imagegen-it/hand-layers:{uuid.uuid4().hex[:8]}"
    tars = [layer_tar(BASE), *(layer_tar(members) for _, members, _ in CASES)]
    docker_client.images.load(image_archive(tars, tag))
    try:
        info = docker_client.api.inspect_image(tag)
        ids = info["RootFS"]["Layers"]
        assert ids == ["sha256:" + _sha(t) for t in tars]  # the engine keeps each tar's digest
        folders = layer_dirs(info)
        assert folders is not None, "the engine here keeps overlay2 folders"
        everything = lambda _: True  # noqa: E731
        from_dirs = {i: read_dir_layer(i, f, everything, lambda _: False) for i, f in zip(ids, folders)}
        from_export = image_layers(docker_client, tag, everything)
        yield {"ids": ids, "dirs": from_dirs, "export": from_export}
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


@pytest.mark.parametrize(("index", "case"), [(i, c[0]) for i, c in enumerate(CASES)])
def test_both_readers_read_a_layer_as_the_engine_applied_it(
    loaded: dict[str, Any], index: int, case: str
) -> None:
    layer_id = loaded["ids"][index + 1]
    expected = CASES[index][2]
    readers: dict[str, Layer] = {
        "layer folders": loaded["dirs"][layer_id],
        "export": loaded["export"][layer_id],
    }
    for reader, layer in readers.items():
        assert {_shape(e) for e in layer.entries} == expected, f"{case}: the {reader} reader"
