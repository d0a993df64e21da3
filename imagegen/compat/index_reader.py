"""What a package index publishes: a project's releases and one wheel's requirements.

Any index pip can use serves the JSON simple API (PEP 691), which lists a project's files and,
from API 1.1 (PEP 700), its versions. A wheel's requirements (``Requires-Dist``) come from its
core metadata file where the index serves one beside the wheel (PEP 658), else from the wheel's
``*.dist-info/METADATA`` read in place with HTTP ranges (the zip's directory at its tail, then
that one member): a torch wheel is close to a gigabyte, its metadata a few kilobytes.

An index that cannot be read is ``IndexUnreachableError`` (exit 3). Its URL may carry a
credential: messages name it through ``imagegen.urls.redact`` and never quote a library's
exception text, which can hold the URL as given.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from imagegen.compat import headers
from imagegen.errors import IndexUnreachableError
from imagegen.urls import redact

if TYPE_CHECKING:
    import requests

_TIMEOUT = 60
# A wheel's dist-info lies just before the zip's directory: small windows read it in two or three.
_METADATA_WINDOW = 2 * 1024 * 1024
_UNREACHABLE_HINT = "check the network and proxy settings, or name a reachable index with --index-url"


@dataclass(frozen=True)
class Project:
    """A project as the index lists it: its final releases (oldest first) and its files."""

    name: str
    versions: tuple[str, ...]
    files: tuple[dict[str, Any], ...]  # each "url" absolute (PEP 691 allows them relative to the page)


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


def _get(http: requests.Session, url: str, index_url: str, **kwargs: Any) -> requests.Response:
    import requests  # deferred, as in headers: only reading an index needs it

    try:
        response = http.get(url, timeout=_TIMEOUT, **kwargs)
    except requests.RequestException as exc:
        raise IndexUnreachableError(
            f"the package index {redact(index_url)} cannot be reached ({type(exc).__name__})",
            hint=_UNREACHABLE_HINT,
        ) from None
    if response.status_code >= 400 and response.status_code != 404:
        raise IndexUnreachableError(
            f"the package index {redact(index_url)} answered HTTP {response.status_code}",
            hint=_UNREACHABLE_HINT
            + (
                "; an index that needs a login takes it in the URL or netrc"
                if response.status_code in (401, 403)
                else ""
            ),
        )
    return response


def read_project(name: str, index_url: str, http: requests.Session) -> Project:
    """``name``'s final releases and files; no releases when the index has no such project."""
    page = index_url.rstrip("/") + f"/{name}/"
    response = _get(http, page, index_url, headers={"Accept": headers.SIMPLE_JSON})
    if response.status_code == 404:
        return Project(name, (), ())
    if not response.headers.get("content-type", "").startswith(headers.SIMPLE_JSON):
        raise IndexUnreachableError(
            f"the package index {redact(index_url)} does not serve the JSON simple API (PEP 691)",
            hint="name an index that does with --index-url",
        )
    try:
        data = response.json()
        files = tuple(
            {**f, "url": urljoin(page, str(f.get("url", "")))}
            for f in data.get("files", [])
            if isinstance(f, dict) and not f.get("yanked")
        )
        listed = data.get("versions") or [_file_version(str(f.get("filename", ""))) for f in files]
    except (ValueError, AttributeError):
        raise IndexUnreachableError(
            f"the package index {redact(index_url)} answered {name}'s page with something "
            "that is not its JSON",
            hint="name another index with --index-url",
        ) from None
    finals = {v for text in listed if text and (v := final_release(str(text))) is not None}
    return Project(name, tuple(str(v) for v in sorted(finals)), files)


def linux_wheel(project: Project, version: str) -> dict[str, Any] | None:
    """The file whose metadata stands for ``version``'s Linux build: the wheel the headers come
    from (``headers.pick_wheel``: CPython 3.11's x86-64 manylinux one), else any wheel of it."""
    picked = headers.pick_wheel(version, list(project.files))
    wheels = [f for f in project.files if str(f.get("filename", "")).endswith(".whl")]
    of_version = [f for f in wheels if _file_version(str(f["filename"])) == str(Version(version))]
    chosen = [f for f in of_version if picked is not None and f["filename"] == picked.filename] or of_version
    return chosen[0] if chosen else None


def _metadata_text(entry: dict[str, Any], index_url: str, http: requests.Session) -> str:
    url = str(entry["url"])
    if entry.get("core-metadata") or entry.get("data-dist-info-metadata"):
        response = _get(http, url + ".metadata", index_url)
        if response.status_code == 200:
            return response.text
    size = int(entry.get("size") or 0)
    try:
        with zipfile.ZipFile(headers.RangedFile(url, size, http, window=_METADATA_WINDOW)) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            return wheel.read(member).decode("utf-8", "replace")
    except headers.RangesRefused:
        raise IndexUnreachableError(
            f"the file host of {entry['filename']} refuses HTTP ranges and the index serves "
            "no PEP 658 metadata",
            hint="name an index that serves either with --index-url",
        ) from None
    except (StopIteration, zipfile.BadZipFile):
        raise IndexUnreachableError(
            f"{entry['filename']} on {redact(index_url)} holds no readable METADATA"
        ) from None
    except OSError as exc:  # requests' errors surface through the zip reader
        raise IndexUnreachableError(
            f"{entry['filename']} on {redact(index_url)} could not be read ({type(exc).__name__})",
            hint=_UNREACHABLE_HINT,
        ) from None


def requirements(project: Project, version: str, index_url: str, http: requests.Session) -> tuple[str, ...]:
    """The ``Requires-Dist`` lines of ``version``'s Linux wheel (none when it has no wheel)."""
    entry = linux_wheel(project, version)
    if entry is None:
        return ()
    message = HeaderParser().parsestr(_metadata_text(entry, index_url, http))
    return tuple(message.get_all("Requires-Dist") or ())
