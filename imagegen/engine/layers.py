"""An image's layers, read by imagegen itself from the engine's export of the image.

``docker save`` (the engine's ``GET /images/{name}/get``) streams the image as a tar of its layer
tars, in either layout engines write (Docker's ``<id>/layer.tar`` or an OCI layout's
``blobs/sha256/<digest>``, plain or gzip-compressed). Each layer is hashed here as it streams
(its sha256 over the uncompressed tar is the layer's ``diff_id``, what an image config lists)
and its tar headers are parsed, so what a layer adds, replaces or deletes is known without
running anything the image holds: no code of the image's is asked about its own files.

Each member is read the way the engine applies it (moby's ``UnpackLayer``): its name cleaned
(``./a//b/../c`` is ``/a/c``; nothing climbs above the root), a folder the layer leaves out but
holds something in made as the engine makes it (root's, 0755), a hard link to a file earlier in
the layer read as that file, ``.wh.<name>`` as the deletion of ``<name>`` and ``.wh..wh..opq`` as
an opaque folder. The other reader (``imagegen.engine.layer_dirs``) reads the folders the engine
wrote when it applied them; both give the same entries for the same layer.

Nothing is written to disk; memory holds the entries' headers (not their data), and the
SHA-256 of the regular files ``hash_file`` selects.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import IO, Any, Literal

from imagegen.engine.client import connection
from imagegen.errors import VerificationFailedError

Kind = Literal["file", "dir", "symlink", "hardlink", "whiteout", "opaque", "other"]
# The whiteout names of the OCI image layer spec (and Docker's): ``.wh.<name>`` deletes <name>
# from the layers below; ``.wh..wh..opq`` in a folder hides everything below in that folder.
WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class LayerEntry:
    """One entry of a layer tar: ``path`` absolute and normalized (a whiteout's path is what it
    deletes; an opaque marker's is its folder)."""

    path: str
    kind: Kind
    size: int = 0
    target: str = ""  # a symbolic link's target, as the tar has it; a hard link's file, cleaned
    # (a hard link to a file earlier in its layer reads as that file: see ``read_layer``)
    sha256: str | None = None  # a regular file's content digest, when it was asked for
    data: bytes | None = None  # a regular file's content, when it was asked for (small files)
    mode: int = 0o755  # permission bits (with set-id and sticky), as the engine applies them
    uid: int = 0
    gid: int = 0

    @property
    def writable_by_others(self) -> bool:
        """Whether a user other than its owner may change what it holds (group or other write)."""
        return bool(self.mode & 0o022)


@dataclass(frozen=True)
class Layer:
    diff_id: str  # "sha256:<hex>" of the uncompressed layer tar
    entries: tuple[LayerEntry, ...]


def normalize(name: str) -> str:
    """A tar member name as the absolute path the engine writes it to: ``./usr//lib/`` ->
    ``/usr/lib``, ``usr/../opt/x`` -> ``/opt/x`` (moby cleans each name; ``..`` above the root
    stays at the root, where the engine refuses the layer instead)."""
    return posixpath.normpath("/" + name.lstrip("/"))


def entry_of(member: tarfile.TarInfo, sha256: str | None = None, data: bytes | None = None) -> LayerEntry:
    path = normalize(member.name)
    folder, _, base = path.rpartition("/")
    # A symbolic link's own mode is always 0777 on Linux (the engine cannot change it).
    mode, uid, gid = 0o777 if member.issym() else member.mode & 0o7777, member.uid, member.gid
    if base == OPAQUE_MARKER:
        return LayerEntry(folder or "/", "opaque")
    if base.startswith(WHITEOUT_PREFIX):
        return LayerEntry(f"{folder}/{base[len(WHITEOUT_PREFIX) :]}", "whiteout")
    if member.isreg():
        return LayerEntry(path, "file", member.size, sha256=sha256, data=data, mode=mode, uid=uid, gid=gid)
    if member.isdir():
        return LayerEntry(path, "dir", mode=mode, uid=uid, gid=gid)
    if member.issym():
        return LayerEntry(path, "symlink", target=member.linkname, mode=mode, uid=uid, gid=gid)
    if member.islnk():
        return LayerEntry(path, "hardlink", target=normalize(member.linkname), mode=mode, uid=uid, gid=gid)
    return LayerEntry(path, "other", mode=mode, uid=uid, gid=gid)


def implied_folders(path: str, seen: set[str]) -> list[LayerEntry]:
    """The folders above ``path`` that a layer holds something in but lists no entry for, top
    first: the engine makes them (``MkdirAll``, 0755, root's), so the layer's folder holds them."""
    missing = []
    folder = posixpath.dirname(path)
    while folder != "/" and folder not in seen:
        seen.add(folder)
        missing.append(LayerEntry(folder, "dir"))
        folder = posixpath.dirname(folder)
    return missing[::-1]


class _Chunks(io.RawIOBase):
    """A readable file over an iterable of byte chunks (the engine's response)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class _LayerStream(io.RawIOBase):
    """A layer tar's uncompressed bytes (gunzipped where the export compressed it), hashed as read."""

    def __init__(self, raw: IO[bytes], head: bytes) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 16) if head.startswith(_GZIP_MAGIC) else None
        self._pending = self._convert(head)
        self.digest = hashlib.sha256()

    def _convert(self, data: bytes) -> bytes:
        return self._inflate.decompress(data) if self._inflate is not None else data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            data = self._raw.read(_BLOCK)
            if not data:
                if self._inflate is not None:
                    self._pending, self._inflate = self._inflate.flush(), None
                    if self._pending:
                        break
                return 0
            self._pending = self._convert(data)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self.digest.update(self._pending[:size])
        self._pending = self._pending[size:]
        return size

    def drain(self) -> str:
        """Read to the end (the tar's closing padding), and return the layer's diff_id."""
        while self.read(_BLOCK):
            pass
        return "sha256:" + self.digest.hexdigest()


def _is_layer_name(name: str) -> bool:
    return name.endswith("/layer.tar") or name == "layer.tar" or name.startswith("blobs/")


def _looks_like_tar(head: bytes) -> bool:
    # "ustar" at 257 (POSIX and GNU tars); an empty layer is only the two zero end blocks.
    return head.startswith(_GZIP_MAGIC) or head[257:262] == b"ustar" or (len(head) >= 512 and not any(head))


# Content is kept (``keep_data``) only for files up to this size: RECORD files, not modules.
DATA_LIMIT = 16 << 20
Select = Callable[[str], bool]


def nothing(_: str) -> bool:
    """A ``Select`` that selects no file."""
    return False


def _content(handle: IO[bytes] | None, keep: bool) -> tuple[str, bytes | None]:
    digest, kept = hashlib.sha256(), []
    while handle is not None and (block := handle.read(_BLOCK)):
        digest.update(block)
        kept += [block] if keep else []
    return digest.hexdigest(), b"".join(kept) if keep else None


def read_layer(stream: IO[bytes], head: bytes, hash_file: Select, keep_data: Select = nothing) -> Layer:
    """One layer tar (``head``: its first bytes, already read from ``stream``), its members read
    as the engine applies them (see the module's doc)."""
    layer = _LayerStream(stream, head)
    entries: list[LayerEntry] = []
    folders: set[str] = set()
    names: dict[str, list[int]] = {}  # a file's path -> the indexes of its names (hard links)
    with tarfile.open(fileobj=io.BufferedReader(layer, _BLOCK), mode="r|", bufsize=_BLOCK) as tar:
        for member in tar:
            digest = data = None
            path = normalize(member.name)
            keep = member.isreg() and member.size <= DATA_LIMIT and keep_data(path)
            if member.isreg() and (keep or hash_file(path)):
                digest, data = _content(tar.extractfile(member), keep)
            entry = entry_of(member, digest, data)
            # An opaque marker stands for its folder, which the engine makes too when it is not listed.
            entries += implied_folders(entry.path + "/" if entry.kind == "opaque" else entry.path, folders)
            if entry.kind == "dir":
                folders.add(entry.path)
            elif entry.kind == "file":
                names[entry.path] = [len(entries)]
            elif entry.kind == "hardlink" and entry.target in names:
                # One more name of that file: its content; the engine then applies this member's
                # mode and owner to the file, which every name of it shares.
                group = names[entry.target]
                for index in group:
                    entries[index] = replace(entries[index], mode=entry.mode, uid=entry.uid, gid=entry.gid)
                first = entries[group[0]]
                entry = replace(first, path=entry.path)
                group.append(len(entries))
                names[entry.path] = group
            entries.append(entry)
    return Layer(layer.drain(), tuple(entries))


def read_export(chunks: Iterable[bytes], hash_file: Select, keep_data: Select = nothing) -> dict[str, Layer]:
    """Every layer of an image export (``docker save``'s tar, as byte chunks), by diff_id."""
    layers: dict[str, Layer] = {}
    with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks), _BLOCK), mode="r|", bufsize=_BLOCK) as outer:
        for member in outer:
            if not (member.isreg() and _is_layer_name(member.name)):
                continue  # a metadata file, or a link to a layer stored once under another name
            handle = outer.extractfile(member)
            if handle is None:
                continue
            head = handle.read(512)
            if not _looks_like_tar(head):
                continue  # an OCI layout's config or manifest blob
            layer = read_layer(handle, head, hash_file, keep_data)
            layers[layer.diff_id] = layer
    return layers


def image_layers(
    client: Any, image: str, hash_file: Select = nothing, keep_data: Select = nothing
) -> dict[str, Layer]:
    """``image``'s layers by diff_id, read from the engine's export of it (see the module's doc).

    Raises VerificationFailedError when the export cannot be read as one.
    """
    try:
        return read_export(client.api.get_image(image, chunk_size=_BLOCK), hash_file, keep_data)
    except (tarfile.TarError, zlib.error, EOFError) as exc:
        raise VerificationFailedError(
            f"the engine's export of {image} cannot be read as layers ({exc})",
            hint="check the image with `docker save IMAGE | tar -t`; rebuild it if it is damaged",
        ) from None


def exported_layers(
    image: str, hash_file: Select = nothing, keep_data: Select = nothing, timeout: float = 600
) -> dict[str, Layer]:
    """``image_layers`` through a connection of its own (``timeout``: the longest the export may
    stall between two chunks)."""
    with connection(f"exporting {image}", timeout) as client:
        return image_layers(client, image, hash_file, keep_data)
