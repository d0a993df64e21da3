"""What a package index publishes: a project's releases and one wheel's requirements.

Any index pip can use serves the JSON simple API (PEP 691), which lists a project's files and,
from API 1.1 (PEP 700), its versions. A wheel's requirements (``Requires-Dist``) come from its
core metadata file where the index serves one beside the wheel (PEP 658), else from the wheel's
``*.dist-info/METADATA`` read in place with HTTP ranges (the zip's directory at its tail, then
that one member): a torch wheel is close to a gigabyte, its metadata a few kilobytes.

An index that cannot be read is ``IndexUnreachableError`` (exit 3): one that does not answer,
answers too slowly (each answer, from connecting to its last byte, within ``ANSWER_DEADLINE``),
or answers with something other than what the APIs promise (a page that is not a JSON object
of the PEP 691 shape, a file size that is no number of bytes, a ranged answer of other length
than asked), named with the project and what was wrong. Its URL may carry a credential:
messages name it through ``imagegen.urls.redact`` and never quote a library's exception text,
which can hold the URL as given.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from imagegen.compat import headers
from imagegen.deadlines import DeadlinePassed, answer_within
from imagegen.errors import IndexUnreachableError
from imagegen.urls import redact

if TYPE_CHECKING:
    import requests

# One answer, whole (connect, head, body): a project's page (torch's is a few megabytes), a
# metadata file, one window of a wheel. A minute is slack on any link that can build images;
# callers may pass their own (the tests pass a second).
ANSWER_DEADLINE = 60.0
# A wheel's dist-info lies just before the zip's directory: small windows read it in two or three.
_METADATA_WINDOW = 2 * 1024 * 1024
# A file "size" beyond this is no wheel's (torch's are under a gigabyte).
_MAX_FILE_SIZE = 1 << 40
_UNREACHABLE_HINT = "check the network and proxy settings, or name a reachable index with --index-url"
_MALFORMED_HINT = (
    "--index-url must name a PEP 691 simple API (the URL pip takes as --index-url, e.g. "
    "https://HOST/simple); ask whoever runs this index, or name another"
)


@dataclass(frozen=True)
class Project:
    """A project as the index lists it: its final releases (oldest first) and its files."""

    name: str
    versions: tuple[str, ...]
    files: tuple[dict[str, Any], ...]  # each "url" absolute (PEP 691 allows them relative to the page)
    found: bool = True  # False: the index answered 404 for its page


def final_release(text: str) -> Version | None:
    """``text`` as a final release (no pre-, post-, development release or local label), else None."""
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    if version.is_prerelease or version.is_devrelease or version.is_postrelease or version.local:
        return None
    return version


def _file_version(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _deadline(given: float | None) -> float:
    return ANSWER_DEADLINE if given is None else given


def _get(
    http: requests.Session,
    url: str,
    index_url: str,
    what: str,
    deadline: float,
    *,
    allow_404: bool = False,
    **kwargs: Any,
) -> requests.Response:
    """``url``'s answer within ``deadline``; any failure is IndexUnreachableError naming ``what``."""
    import requests  # deferred, as in headers: only reading an index needs it

    host = urlsplit(url).hostname or ""
    source = f"the package index {redact(index_url)}"
    if host != (urlsplit(index_url).hostname or ""):
        source += f" (its file host {host})"
    try:
        response = answer_within(http, "GET", url, deadline, **kwargs)
    except DeadlinePassed:
        raise IndexUnreachableError(
            f"{source} did not send {what} within {deadline:g} s",
            hint="the server stalls or sends its answer a few bytes at a time: check the network "
            "and proxy settings, or name another index with --index-url",
        ) from None
    except (requests.RequestException, ValueError) as exc:
        raise IndexUnreachableError(
            f"{source} cannot be reached ({type(exc).__name__})", hint=_UNREACHABLE_HINT
        ) from None
    status = response.status_code
    if status >= 400 and not (status == 404 and allow_404):
        raise IndexUnreachableError(
            f"{source} answered HTTP {status} for {what}",
            hint=_UNREACHABLE_HINT
            + ("; an index that needs a login takes it in the URL or netrc" if status in (401, 403) else ""),
        )
    return response


def _shown(value: Any) -> str:
    """A JSON value as the answer had it, shortened: ``5``, ``"abc"``, ``Infinity``."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _files(page: str, data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The page's files, each with a string filename, an absolute URL and a size (when given)
    that is a number of bytes; ValueError naming what is not."""
    listed = data.get("files", [])
    if not isinstance(listed, list):
        raise ValueError(f'"files" is {_shown(listed)}, not a list')
    files = []
    for number, entry in enumerate(listed):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("filename"), str)
            and isinstance(entry.get("url"), str)
        ):
            raise ValueError(f"file {number} is {_shown(entry)}, not an object with a filename and a url")
        size = entry.get("size")
        if size is not None and not (
            isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= _MAX_FILE_SIZE
        ):
            raise ValueError(f"{entry['filename']}'s size is {_shown(size)}, not a number of bytes")
        if not entry.get("yanked"):
            files.append({**entry, "url": urljoin(page, entry["url"])})
    return tuple(files)


def _versions(data: dict[str, Any], files: tuple[dict[str, Any], ...]) -> list[str]:
    """The versions the page lists (PEP 700), else those of its files' names."""
    listed = data.get("versions")
    if listed is not None and not (isinstance(listed, list) and all(isinstance(v, str) for v in listed)):
        raise ValueError(f'"versions" is {_shown(listed)}, not a list of strings')
    if listed:
        return listed
    return [v for f in files if (v := _file_version(f["filename"])) is not None]


def read_project(name: str, index_url: str, http: requests.Session, deadline: float | None = None) -> Project:
    """``name``'s final releases and files; no releases (``found`` False) when the index answers
    404 for it. Each answer within ``deadline`` seconds (default ``ANSWER_DEADLINE``)."""
    page = index_url.rstrip("/") + f"/{name}/"
    response = _get(
        http,
        page,
        index_url,
        f"{name}'s page",
        _deadline(deadline),
        allow_404=True,
        headers={"Accept": headers.SIMPLE_JSON},
    )
    if response.status_code == 404:
        return Project(name, (), (), found=False)
    if not response.headers.get("content-type", "").startswith(headers.SIMPLE_JSON):
        raise IndexUnreachableError(
            f"the package index {redact(index_url)} does not serve the JSON simple API (PEP 691)",
            hint="name an index that does with --index-url",
        )
    try:
        data = json.loads(response.content)
        if not isinstance(data, dict):
            raise ValueError(f"{_shown(data)}, not a JSON object")
        files = _files(page, data)
        listed = _versions(data, files)
    except RecursionError:
        problem = "JSON nested too deeply to read"
    except ValueError as exc:  # a JSONDecodeError or UnicodeDecodeError too: neither quotes the URL
        problem = str(exc) if not isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)) else "not JSON"
    else:
        finals = {v for text in listed if (v := final_release(text)) is not None}
        return Project(name, tuple(str(v) for v in sorted(finals)), files)
    raise IndexUnreachableError(
        f"the package index {redact(index_url)} answered {name}'s page with something that is not "
        f"its PEP 691 JSON: {problem}",
        hint=_MALFORMED_HINT,
    )


def linux_wheel(project: Project, version: str) -> dict[str, Any] | None:
    """The file whose metadata stands for ``version``'s Linux build: the wheel the headers come
    from (``headers.pick_wheel``: CPython 3.11's x86-64 manylinux one), else any wheel of it."""
    picked = headers.pick_wheel(version, list(project.files))
    wheels = [f for f in project.files if str(f.get("filename", "")).endswith(".whl")]
    of_version = [f for f in wheels if _file_version(str(f["filename"])) == str(Version(version))]
    chosen = [f for f in of_version if picked is not None and f["filename"] == picked.filename] or of_version
    return chosen[0] if chosen else None


class _RangedWheel(headers.RangedFile):
    """``headers.RangedFile`` whose every window comes through ``_get``: within the deadline, and
    as long as asked (a 206 of other length is the file host's error, not a short read)."""

    def __init__(
        self, entry: dict[str, Any], index_url: str, http: requests.Session, deadline: float
    ) -> None:
        super().__init__(str(entry["url"]), int(entry["size"]), http, window=_METADATA_WINDOW)
        self.filename, self.index_url, self.deadline = str(entry["filename"]), index_url, deadline

    def _fetch(self, start: int, length: int) -> None:
        last = min(self.size, start + length) - 1
        response = _get(
            self.http,
            self.url,
            self.index_url,
            f"bytes {start}-{last} of {self.filename}",
            self.deadline,
            read_body=lambda status: status == 206,  # a whole wheel in answer to a range: left unread
            headers={"Range": f"bytes={start}-{last}"},
        )
        if response.status_code != 206:
            raise headers.RangesRefused(self.url)
        if len(response.content) != last - start + 1:
            raise IndexUnreachableError(
                f"the file host of {self.filename} on {redact(self.index_url)} answered a request for "
                f"bytes {start}-{last} ({last - start + 1}) with {len(response.content)} bytes",
                hint="the file host answers HTTP ranges wrongly: " + _MALFORMED_HINT,
            )
        self.requests += 1
        self.window_start, self.window = start, response.content


def _metadata_text(entry: dict[str, Any], index_url: str, http: requests.Session, deadline: float) -> str:
    url, filename = str(entry["url"]), str(entry["filename"])
    if entry.get("core-metadata") or entry.get("data-dist-info-metadata"):
        response = _get(
            http, url + ".metadata", index_url, f"the metadata of {filename}", deadline, allow_404=True
        )
        if response.status_code == 200:
            return response.text
    if not entry.get("size"):
        raise IndexUnreachableError(
            f"{filename} on {redact(index_url)}: the index gives neither its size (to read its METADATA "
            "in place) nor PEP 658 metadata",
            hint=_MALFORMED_HINT,
        )
    try:
        with zipfile.ZipFile(_RangedWheel(entry, index_url, http, deadline)) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            return wheel.read(member).decode("utf-8", "replace")
    except headers.RangesRefused:
        raise IndexUnreachableError(
            f"the file host of {filename} refuses HTTP ranges and the index serves no PEP 658 metadata",
            hint="name an index that serves either with --index-url",
        ) from None
    except (StopIteration, zipfile.BadZipFile, EOFError, NotImplementedError, ValueError, zlib.error):
        raise IndexUnreachableError(
            f"{filename} on {redact(index_url)} holds no readable METADATA", hint=_MALFORMED_HINT
        ) from None
    except OSError as exc:
        raise IndexUnreachableError(
            f"{filename} on {redact(index_url)} could not be read ({type(exc).__name__})",
            hint=_UNREACHABLE_HINT,
        ) from None


def requirements(
    project: Project, version: str, index_url: str, http: requests.Session, deadline: float | None = None
) -> tuple[str, ...]:
    """The ``Requires-Dist`` lines of ``version``'s Linux wheel (none when it has no wheel)."""
    entry = linux_wheel(project, version)
    if entry is None:
        return ()
    message = HeaderParser().parsestr(_metadata_text(entry, index_url, http, _deadline(deadline)))
    return tuple(str(line) for line in message.get_all("Requires-Dist") or ())
