"""An image's layers, read by imagegen itself from the engine's export of the image.

``docker save`` (the engine's ``GET /images/{name}/get``) streams the image as a tar of its layer
tars, in either layout engines write (Docker's ``<id>/layer.tar`` or an OCI layout's
``blobs/sha256/<digest>``, plain or gzip-compressed). Each layer is hashed here as it streams
(its sha256 over the uncompressed tar is the layer's ``diff_id``, what an image config lists)
and its tar headers are parsed, so what a layer adds, replaces or deletes is known without
running anything the image holds: no code of the image's is asked about its own files.

Nothing is written to disk; memory holds the entries' headers (not their data), and the
SHA-256 of the regular files ``hash_file`` selects.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal

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
    target: str = ""  # a link's target, as the tar has it
    sha256: str | None = None  # a regular file's content digest, when it was asked for
    data: bytes | None = None  # a regular file's content, when it was asked for (small files)


@dataclass(frozen=True)
class Layer:
    diff_id: str  # "sha256:<hex>" of the uncompressed layer tar
    entries: tuple[LayerEntry, ...]


def normalize(name: str) -> str:
    """A tar member name as an absolute path: ``./usr//lib/`` -> ``/usr/lib``."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    return "/" + "/".join(parts)


def entry_of(member: tarfile.TarInfo, sha256: str | None = None, data: bytes | None = None) -> LayerEntry:
    path = normalize(member.name)
    folder, _, base = path.rpartition("/")
    if base == OPAQUE_MARKER:
        return LayerEntry(folder or "/", "opaque")
    if base.startswith(WHITEOUT_PREFIX):
        return LayerEntry(f"{folder}/{base[len(WHITEOUT_PREFIX) :]}", "whiteout")
    if member.isreg():
        return LayerEntry(path, "file", member.size, sha256=sha256, data=data)
    if member.isdir():
        return LayerEntry(path, "dir")
    if member.issym():
        return LayerEntry(path, "symlink", target=member.linkname)
    if member.islnk():
        return LayerEntry(path, "hardlink", target=normalize(member.linkname))
    return LayerEntry(path, "other")


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
    """One layer tar (``head``: its first bytes, already read from ``stream``)."""
    layer = _LayerStream(stream, head)
    entries = []
    with tarfile.open(fileobj=io.BufferedReader(layer, _BLOCK), mode="r|", bufsize=_BLOCK) as tar:
        for member in tar:
            digest = data = None
            path = normalize(member.name)
            keep = member.isreg() and member.size <= DATA_LIMIT and keep_data(path)
            if member.isreg() and (keep or hash_file(path)):
                digest, data = _content(tar.extractfile(member), keep)
            entries.append(entry_of(member, digest, data))
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
