"""torch's C++ headers of any release, from its wheel on the package index, cached.

A torch wheel is 0.5 to 0.9 GB; its ``torch/include`` members are about 10 MB compressed and
lie together near the start of the zip. So the wheel is read in place: the index's JSON
simple API (PEP 691) gives each file's URL and size, the zip's central directory is read
from its tail with an HTTP Range request, and the include members' span with one more.
Where the file host refuses ranges (it answers 200), the wheel is downloaded whole into a
temporary folder, which is removed once the headers are out.

The headers land in ``~/.cache/imagegen/torch-headers/<version>/include`` (``XDG_CACHE_HOME``
honoured), written to a temporary sibling and renamed into place, so a cache entry is either
whole or absent. The wheel picked is CPython 3.11's manylinux x86-64 one: on the index those are
CUDA builds, so the headers include the CUDA-generated ones the GPU ops' bindings need.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from imagegen import settings
from imagegen.compat.pip_config import pip_install_options
from imagegen.deadlines import DeadlinePassed, answer_within
from imagegen.errors import BuildFailedError, IndexUnreachableError
from imagegen.urls import redact

if TYPE_CHECKING:
    import requests

INCLUDE_PREFIX = "torch/include/"
WHEEL_TAG = "cp311-cp311-manylinux"
WHEEL_ARCH = "x86_64.whl"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# How much one ranged read asks for: the central directory (~1.5 MB) in one request, the
# include members (~10 MB) in one or two.
_CHUNK = 16 * 1024 * 1024
# Whole-answer deadlines (imagegen.deadlines): a socket timeout bounds each read only, and a host
# that trickles bytes would hold `make compat` for ever. The index's page, one ranged window, and
# the whole wheel when the host refuses ranges: a fixed time plus its size at 1 MiB/s.
ANSWER_DEADLINE = 60.0
_SLOWEST_BYTES_PER_S = 1024 * 1024


@dataclass(frozen=True)
class Wheel:
    filename: str
    url: str
    size: int


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    base = env.get(settings.XDG_CACHE_HOME.name) or str(Path.home() / ".cache")
    return Path(base) / "imagegen" / "torch-headers"


def cached_include(version: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """The cached ``include`` folder of torch ``version``, or None when it is not cached."""
    include = cache_root(env) / version / "include"
    return include if include.is_dir() else None


def ca_bundle(env: Mapping[str, str] = os.environ) -> str | bool:
    """The CA bundle pip trusts (an intercepting proxy's CA is in it), else requests' default."""
    for name in (s.name for s in settings.CA_BUNDLES):
        if env.get(name):
            return env[name]
    try:
        cert = pip_install_options().cert
    except ImportError:  # pip absent: requests' own bundle
        return True
    return str(cert) if cert else True


def session(env: Mapping[str, str] = os.environ) -> requests.Session:
    import requests  # deferred: only fetching headers needs it (docker's client brings it)

    s = requests.Session()
    s.verify = ca_bundle(env)
    return s


def pick_wheel(version: str, files: list[dict[str, Any]], page_url: str = "") -> Wheel | None:
    """The CPython 3.11 manylinux x86-64 wheel of ``version`` (the highest build tag, as pip picks);
    its URL resolved against ``page_url``, since PEP 691 lets an index give relative ones."""
    best: tuple[int, Wheel] | None = None
    for entry in files:
        name = str(entry.get("filename", ""))
        if WHEEL_TAG not in name or not name.endswith(WHEEL_ARCH) or entry.get("yanked"):
            continue
        try:
            _, parsed, build, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if parsed != Version(version):
            continue
        number = build[0] if build else -1
        wheel = Wheel(name, urljoin(page_url, str(entry["url"])), int(entry.get("size") or 0))
        if best is None or number > best[0]:
            best = (number, wheel)
    return best[1] if best else None


def size_deadline(size: int) -> float:
    """The whole-answer deadline of ``size`` bytes: the page's, and a second per MiB."""
    return ANSWER_DEADLINE + size / _SLOWEST_BYTES_PER_S


def find_wheel(version: str, index_url: str, http: requests.Session) -> Wheel:
    url = index_url.rstrip("/") + "/torch/"
    response = answer_within(http, "GET", url, ANSWER_DEADLINE, headers={"Accept": SIMPLE_JSON})
    response.raise_for_status()
    if not response.headers.get("content-type", "").startswith(SIMPLE_JSON):
        raise BuildFailedError(
            f"the index at {index_url} does not serve the JSON simple API (PEP 691)",
            hint="name an index that does with --index-url",
        )
    wheel = pick_wheel(version, response.json().get("files", []), url)
    if wheel is None:
        raise BuildFailedError(f"torch {version}: no {WHEEL_TAG}*_{WHEEL_ARCH} wheel on {index_url}")
    return wheel


class RangedFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP Range requests.

    Keeps the last window it fetched; zipfile reads the central directory and then the
    members in file order, so one window serves many reads.
    """

    def __init__(self, url: str, size: int, http: requests.Session, window: int = _CHUNK) -> None:
        super().__init__()
        self.url, self.size, self.http, self.window_size = url, size, http, window
        self.pos = 0
        self.window_start = 0
        self.window = b""
        self.requests = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        wanted = min(len(view), self.size - self.pos)
        if wanted <= 0:
            return 0
        end = self.window_start + len(self.window)
        if not (self.window_start <= self.pos and self.pos + wanted <= end):
            self._fetch(self.pos, max(wanted, self.window_size))
        start = self.pos - self.window_start
        view[:wanted] = self.window[start : start + wanted]
        self.pos += wanted
        return wanted

    def _fetch(self, start: int, length: int) -> None:
        last = min(self.size, start + length) - 1
        # Only a 206's body is read: a host that ignores the range is caught before it sends the
        # whole wheel.
        import requests

        try:
            response = self._answer(start, last)
        except requests.RequestException as exc:
            # zipfile reads a failed read (an OSError, as requests' errors are) as "not a zip
            # file": the host's failure is carried past it instead.
            raise HostFailed(exc) from exc
        if response.status_code != 206:
            raise RangesRefused(self.url)
        self.requests += 1
        self.window_start, self.window = start, response.content

    def _answer(self, start: int, last: int) -> requests.Response:
        response = answer_within(
            self.http,
            "GET",
            self.url,
            size_deadline(last + 1 - start),
            read_body=lambda status: status == 206,
            headers={"Range": f"bytes={start}-{last}"},
        )
        response.raise_for_status()
        return response


class RangesRefused(Exception):
    """The file host answered a Range request with the whole file."""


class HostFailed(Exception):
    """A ranged read's request failed (``cause``: the requests error), carried out of zipfile."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _extract(archive: zipfile.ZipFile, dest: Path) -> int:
    members = [m for m in archive.infolist() if m.filename.startswith(INCLUDE_PREFIX) and not m.is_dir()]
    if not members:
        raise BuildFailedError(f"the wheel has no {INCLUDE_PREFIX} folder")
    # In file order, so the ranged reader moves forward through one window at a time.
    for member in sorted(members, key=lambda m: m.header_offset):
        target = dest / member.filename.removeprefix("torch/")
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(member) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
    return len(members)


def _extract_file(path: Path, dest: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        _extract(archive, dest)


def _download(wheel: Wheel, http: requests.Session, folder: Path) -> Path:
    path = folder / wheel.filename
    deadline = size_deadline(wheel.size)
    ends = time.monotonic() + deadline
    # Streamed to disk (the whole wheel is about a gigabyte), so the deadline is checked between
    # blocks: a trickle is cut off at most one read's timeout past it.
    with http.get(wheel.url, stream=True, timeout=ANSWER_DEADLINE) as response:
        response.raise_for_status()
        with open(path, "wb") as out:
            for block in response.iter_content(1024 * 1024):
                out.write(block)
                if time.monotonic() > ends:
                    raise DeadlinePassed(deadline)
    return path


def fetch_headers(
    version: str, index_url: str, env: Mapping[str, str] = os.environ, http: requests.Session | None = None
) -> Path:
    """torch ``version``'s include folder, from the cache or read out of its wheel.

    ``IndexUnreachableError`` (exit 3) when the index or its file host stops answering: its
    message names the index without a credential and quotes no library's text (which may).
    """
    import requests

    cached = cached_include(version, env)
    if cached is not None:
        return cached
    try:
        return _read_headers(version, index_url, env, http or session(env))
    except DeadlinePassed as exc:
        raise IndexUnreachableError(
            f"torch {version}'s headers: the package index {redact(index_url)} or its file host did not "
            f"send an answer whole within {exc.seconds:.3g} s",
            hint="check the network and proxy settings, or name another index with --index-url",
        ) from None
    except (requests.RequestException, HostFailed) as exc:
        cause = exc.cause if isinstance(exc, HostFailed) else exc
        raise IndexUnreachableError(
            f"torch {version}'s headers: the package index {redact(index_url)} or its file host stopped "
            f"answering ({type(cause).__name__})",
            hint="check the network and proxy settings, or name another index with --index-url",
        ) from None


def _read_headers(version: str, index_url: str, env: Mapping[str, str], http: requests.Session) -> Path:
    wheel = find_wheel(version, index_url, http)
    root = cache_root(env)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=root) as tmp:
        staged = Path(tmp, "entry")
        try:
            with zipfile.ZipFile(RangedFile(wheel.url, wheel.size, http)) as archive:
                _extract(archive, staged)
        except RangesRefused:
            shutil.rmtree(staged, ignore_errors=True)
            with tempfile.TemporaryDirectory(prefix="torch-wheel-") as download:
                _extract_file(_download(wheel, http, Path(download)), staged)
        (staged / "WHEEL").write_text(wheel.filename + "\n")
        final = root / version
        shutil.rmtree(final, ignore_errors=True)
        staged.rename(final)
    return final / "include"


def wheel_of(version: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The wheel file a cached header folder was read from."""
    marker = cache_root(env) / version / "WHEEL"
    return marker.read_text().strip() if marker.is_file() else None
