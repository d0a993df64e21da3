"""The checks of the spec's inputs that name files and folders, or carry numbers and URLs
(``--wheelhouse``, ``--ca-cert``, ``--max-jobs``, ``--torch-index``, ``--op-source``): each returns
the value resolved, or raises one ``BadInputError`` with a hint (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from imagegen.errors import BadInputError
from imagegen.files import read_input, stat_input
from imagegen.urls import Secret, has_userinfo, parse_problem, redact, userinfo


def existing_dir(value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    try:
        is_dir = path.is_dir()
    except OSError:  # a name too long, a folder we may not search: not a usable wheelhouse either
        is_dir = False
    if not is_dir:
        raise BadInputError(
            f"wheelhouse {value} is not a directory",
            hint="pass a folder of wheels, e.g. --wheelhouse /opt/wheels (pip download --dest DIR ...)",
        )
    return path.resolve()


_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


# Debian's bundle of every public CA is about 220 KiB; a file far larger is no bundle, and a path
# to an endless file must not be read without bound.
CA_BUNDLE_LIMIT = 16 << 20


def existing_file(value: str | None) -> Path | None:
    """The --ca-cert bundle, checked here: apt and pip in the build would fail on it later
    without naming it (update-ca-certificates skips a non-PEM file silently)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    hint = "pass a PEM bundle, e.g. --ca-cert /etc/ssl/certs/ca-certificates.crt"
    data = read_input(path, "the CA certificate file", limit=CA_BUNDLE_LIMIT, hint=hint)
    if _PEM_CERTIFICATE not in data:
        raise BadInputError(
            f"CA certificate file {value} is not PEM: it has no {_PEM_CERTIFICATE.decode()} line",
            hint=hint + "; convert a DER file with `openssl x509 -inform der -in FILE -out FILE.pem`",
        )
    return path.resolve()


def max_jobs(value: int | str | None) -> int | None:
    """``--max-jobs`` (or ``IMAGEGEN_MAX_JOBS``'s text, as the cascade found it), checked."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
    if isinstance(value, str) and not value.isdigit():
        raise BadInputError(f"max jobs {value!r} is not a whole number", hint="for example --max-jobs 4")
    jobs = int(value)
    if jobs < 1:
        raise BadInputError(f"max jobs {jobs} is below 1", hint="for example --max-jobs 4, or leave it out")
    if jobs > MAX_JOBS_LIMIT:
        shown = str(jobs) if len(str(jobs)) <= 20 else str(jobs)[:20] + "..."
        raise BadInputError(
            f"max jobs {shown} is more than {MAX_JOBS_LIMIT}",
            hint="for example --max-jobs 4, or leave it out: the build then picks from its cores and memory",
        )
    return jobs


# More compile jobs than any build machine has cores is a typo, and a number this large would
# be passed to make and ninja as it is.
MAX_JOBS_LIMIT = 1024


_INDEX_SCHEMES = ("https", "http", "file")
# RFC 3986's characters (unreserved, reserved and '%'): no white space, no control character,
# no quote or backslash that could end the shell word the URL is rendered into.
_URL_CHARS_RE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&()*+,;=%]+")
# The BuildKit secret that hands the pip step a torch index's URL with its credentials.
TORCH_INDEX_SECRET_ID = "torch-index"


def index_url(value: str | None) -> str | None:
    """``--torch-index``: a URL pip can take as ``--index-url``, or bad input naming what is wrong.

    The URL is returned as given, credentials and all (``index_secret`` keeps them for the build);
    no message quotes them: each shows the URL with its userinfo as ``***``.
    """
    if value is None:
        return None
    hint = "pass the index's URL, e.g. --torch-index https://pypi.example.com/simple (or file:///srv/index)"
    redacted = redact(value)
    shown = redacted if len(redacted) <= 80 else redacted[:77] + "..."
    if not _URL_CHARS_RE.fullmatch(value):
        raise BadInputError(
            f"--torch-index {shown!r} is not a URL: it has characters a URL cannot hold",
            hint=hint + "; percent-encode spaces and quotes",
        )
    if any(c in userinfo(value) for c in "/?#"):
        # pip would read the URL otherwise than as it is meant: part of the password as the host.
        raise BadInputError(
            f"--torch-index {shown!r} is not a URL pip reads as meant: its user or password "
            "holds a '/', '?' or '#' (or its path an '@')",
            hint="percent-encode them: '/' as %2F, '?' as %3F, '#' as %23, '@' as %40",
        )
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
    except ValueError as exc:
        raise BadInputError(
            f"--torch-index {shown!r} is not a URL: {parse_problem(exc)}", hint=hint
        ) from None
    if parts.scheme.lower() not in _INDEX_SCHEMES:
        raise BadInputError(
            f"--torch-index {shown!r} is not a URL pip can use: "
            + (f"scheme {parts.scheme!r}" if parts.scheme else "it has no scheme"),
            hint=hint,
        )
    if parts.scheme.lower() != "file" and not parts.hostname:
        raise BadInputError(f"--torch-index {shown!r} names no host", hint=hint)
    if parts.scheme.lower() == "file" and not parts.path.startswith("/"):
        raise BadInputError(f"--torch-index {shown!r} names no absolute path", hint=hint)
    if parts.scheme.lower() == "file" and has_userinfo(value):
        raise BadInputError(f"--torch-index {shown!r}: a file:// index takes no user or password", hint=hint)
    return value


def index_secret(url: str | None, buildkit: bool) -> Secret | None:
    """A checked torch index URL with credentials, whole, as the build secret ``torch-index``;
    None for a URL without any. (The Dockerfile and the proof show it as ``redact`` does.)

    The classic builder has no build secrets, and the only other ways in (the Dockerfile's
    text, a build argument) keep the password in the image's history: bad input, exit 2.
    """
    if url is None or not has_userinfo(url):
        return None
    if not buildkit:
        raise index_needs_buildkit(url)
    return Secret(url)


def index_needs_buildkit(url: str) -> BadInputError:
    """The error for a torch index with credentials and a builder without build secrets."""
    return BadInputError(
        f"--torch-index {redact(url)!r} has credentials, which only BuildKit can pass to the build "
        "(as a build secret): the classic builder would write them into the image's history",
        hint="build with BuildKit (drop --no-buildkit or IMAGEGEN_BUILDKIT=0; `imagegen doctor` "
        "says whether this engine has it), or use an index that needs no credentials",
    )


def op_source_paths(dirs: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--op-source`` folder can at least be looked up (a name too long is bad input here)."""
    for folder in dirs:
        stat_input(Path(folder).expanduser(), "--op-source")
    return dirs
