"""A small client of the OCI distribution API (v2): what publishing needs and no more.

Resolve a tag to its manifest's descriptor, put and get blobs and manifests, ask for referrers.
Why not a library: the one on the package index that speaks this API from Python (oras-py) pushes
files from disk, has no way to put an image index or keep the referrers tag, and retries every
failed request with growing sleeps (minutes before a wrong address fails); the API itself is a
handful of requests. Transport is ``requests`` (its redirects drop the credentials when they leave
the registry's host, as blob downloads redirected to object storage need).

Scheme: HTTPS, except for a registry on the loopback (``localhost``, ``127.0.0.0/8``, ``::1``),
which Docker also reaches over plain HTTP without configuration, and hosts named in
``IMAGEGEN_INSECURE_REGISTRIES`` (comma-separated ``host:port``).

Deadlines: each answer (connecting, sending, the head and the whole body) must arrive within one
deadline, ``ANSWER_DEADLINE`` (120 s) for one that sends nothing large, plus one second per
``UPLOAD_RATE`` bytes it uploads. ``requests``' own timeout bounds each socket read, so a server
that sends a byte every few seconds would keep a command waiting for ever:
``imagegen.deadlines.answer_within`` bounds the whole. A registry past it is a failure of the
registry (exit 1), named with its host and the deadline. The package index reader
(``imagegen.compat.index_reader``) reads through the same function, with its own deadline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from imagegen import settings
from imagegen.deadlines import DeadlinePassed, answer_within
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.hosts import is_loopback
from imagegen.imagespec.reference import digest_problem
from imagegen.registry import auth
from imagegen.registry.manifest import MANIFEST_TYPES, OCI_INDEX, Descriptor, sha256_digest

if TYPE_CHECKING:
    pass

INSECURE_REGISTRIES = settings.INSECURE_REGISTRIES.name
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
# The whole of one answer (connect, send, head, body): manifests, configs and proof documents are
# kilobytes to a few megabytes, so two minutes is slack on any link a push can use.
ANSWER_DEADLINE = 120.0
# An upload adds a second per this many bytes to its deadline (256 KiB/s: a slow uplink).
UPLOAD_RATE = 256 * 1024


@dataclass(frozen=True)
class Reference:
    """``registry/repository[:tag][@digest]``, read by Docker's rules: the first component is a
    registry when it has a ``.`` or a ``:`` or is ``localhost``; otherwise Docker Hub."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def ref(self) -> str:
        """What to ask the manifests endpoint for: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        text += f":{self.tag}" if self.tag else ""
        return text + (f"@{self.digest}" if self.digest else "")


def names_registry(name: str) -> bool:
    """True when ``name``'s first component is a registry host (``host:port/...``, ``a.b/...``)."""
    first, sep, _ = name.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def parse_reference(name: str) -> Reference:
    """Docker's reading of an image name; BadInputError for one it cannot read."""
    rest, _, digest = name.partition("@")
    # Checked before any request: a registry answers a malformed digest with an error of its own
    # (a 500 from some), which would read as a failure of the registry rather than of the input.
    problem = digest_problem(digest) if "@" in name else None
    if problem is not None:
        raise BadInputError(f"{name!r}: {problem}", hint="e.g. NAME@sha256:0123... (64 hex digits)")
    if names_registry(rest):
        registry, _, path = rest.partition("/")
    else:
        registry, path = DOCKER_HUB, rest
    last = path.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        path, _, tag = path.rpartition(":")
    if not path or path != path.lower() or tag == "":
        raise BadInputError(
            f"{name!r} is not an image reference", hint="e.g. registry.example:5000/team/ops:1"
        )
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return Reference(registry, path, tag, digest or None)


def _loopback(registry: str) -> bool:
    if registry.startswith("["):  # [::1]:5000
        host = registry[1:].split("]", 1)[0]
    else:
        host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    return is_loopback(host)


def base_url(registry: str, env: Mapping[str, str] = os.environ) -> str:
    insecure = {h.strip() for h in env.get(INSECURE_REGISTRIES, "").split(",") if h.strip()}
    scheme = "http" if _loopback(registry) or registry in insecure else "https"
    host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
    return f"{scheme}://{host}"


class RegistryClient:
    """One registry, with its credentials and the tokens it handed out (one per scope)."""

    def __init__(
        self, registry: str, env: Mapping[str, str] = os.environ, deadline: float | None = None
    ) -> None:
        import requests  # deferred: a dependency of the docker SDK, used only when publishing

        self.registry = registry
        self.url = base_url(registry, env)
        # Read when the client is made, so a test can shorten ANSWER_DEADLINE for a whole command.
        self.deadline = ANSWER_DEADLINE if deadline is None else deadline
        self._session = requests.Session()
        self._config = auth.docker_config(env)
        self._credentials: auth.Credentials | None = None
        self._looked_up = False
        self._authorization: dict[str, str] = {}  # scope -> Authorization header

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport and auth

    def _creds(self) -> auth.Credentials | None:
        if not self._looked_up:
            self._credentials = auth.find_credentials(self.registry, self._config)
            self._looked_up = True
        return self._credentials

    def _authorize(self, challenge: auth.Challenge, scope: str) -> str | None:
        """The Authorization header that answers ``challenge``, or None when none can."""
        creds = self._creds()
        if challenge.scheme == "basic":
            return None if creds is None else creds.basic()
        if challenge.scheme != "bearer" or not challenge.params.get("realm"):
            return None
        params = {"scope": challenge.params.get("scope") or scope}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        headers = {"Authorization": creds.basic()} if creds is not None else {}
        answer = self._send("GET", challenge.params["realm"], params=params, headers=headers)
        if answer.status_code != 200:
            return None
        try:
            data = answer.json()
            token = data.get("token") or data.get("access_token")
        except (ValueError, AttributeError):
            return None
        return f"Bearer {token}" if isinstance(token, str) and token else None

    def request(
        self,
        method: str,
        path: str,
        repository: str,
        *,
        push: bool = False,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        params: Mapping[str, str] | None = None,
        url: str | None = None,
    ) -> Any:
        """One request (``path`` under ``/v2/``, or a whole ``url``), answering a 401 once."""
        scope = f"repository:{repository}:{'pull,push' if push else 'pull'}"
        sent = dict(headers or {})
        target = url or f"{self.url}/v2/{path}"
        for attempt in range(2):
            if scope in self._authorization:
                sent["Authorization"] = self._authorization[scope]
            response = self._send(method, target, headers=sent, data=data, params=params)
            if response.status_code != 401 or attempt:
                return response
            challenge = auth.parse_challenge(response.headers.get("WWW-Authenticate", ""))
            answer = None if challenge is None else self._authorize(challenge, scope)
            if answer is None:
                return response
            self._authorization[scope] = answer
        return response

    def _send(self, method: str, url: str, *, data: bytes | None = None, **kwargs: Any) -> Any:
        """One request and its whole answer within the deadline (longer by the upload's size)."""
        deadline = self.deadline + round(len(data or b"") / UPLOAD_RATE, 1)
        try:
            return answer_within(self._session, method, url, deadline, data=data, **kwargs)
        except DeadlinePassed:
            raise BuildFailedError(
                f"registry {self.registry} did not answer {method} {url.split('?', 1)[0]} "
                f"within {deadline:g} s",
                hint="a registry that stalls or sends its answer a few bytes at a time: check the "
                "network and the registry, then run the command again",
            ) from None
        except OSError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: OSError) -> BuildFailedError:
        return BuildFailedError(
            f"registry {self.registry} did not answer: {exc}",
            hint="check the address, and that it speaks HTTPS (plain HTTP: localhost, or "
            f"{INSECURE_REGISTRIES}=host:port)",
        )

    def malformed(self, what: str, problem: str) -> BuildFailedError:
        """The failure for a document this registry sent that is not what the API promises
        (``problem``: "not a JSON object: ...", "names no config"): exit 1, as for its errors."""
        return BuildFailedError(
            f"{self.registry}: {what} is {problem}",
            hint="the registry sent something other than an OCI document: check that the address "
            "names an OCI registry, or ask whoever runs it",
        )

    def _failed(self, what: str, response: Any) -> BuildFailedError:
        body = (response.text or "")[:500]
        hint = "check `docker login` for this registry" if response.status_code in (401, 403) else None
        return BuildFailedError(
            f"{what}: {self.registry} answered {response.status_code} {body}".strip(), hint=hint
        )

    # ------------------------------------------------------------------ the API

    def _manifest(self, repository: str, ref: str, accept: tuple[str, ...], what: str) -> Any:
        """The GET of a manifest's response; None for a 404, a failure for any other non-200."""
        response = self.request(
            "GET", f"{repository}/manifests/{ref}", repository, headers={"Accept": ", ".join(accept)}
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._failed(what, response)
        return response

    def resolve(self, reference: Reference) -> Descriptor | None:
        """The descriptor of what ``reference`` names (None: no such manifest)."""
        what = f"resolving {reference}"
        response = self._manifest(reference.repository, reference.ref, MANIFEST_TYPES, what)
        if response is None:
            return None
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        # The digest is the body's: a registry's Docker-Content-Digest is only a claim about it.
        return Descriptor.of(media_type, bytes(response.content))

    def get_manifest(
        self, repository: str, ref: str, accept: tuple[str, ...] = MANIFEST_TYPES
    ) -> bytes | None:
        response = self._manifest(repository, ref, accept, f"reading {repository}:{ref}")
        if response is None:
            return None
        body = bytes(response.content)
        if ref.startswith("sha256:") and sha256_digest(body) != ref:
            raise BuildFailedError(f"{self.registry}/{repository}@{ref}: the registry sent other bytes")
        return body

    def put_manifest(self, repository: str, ref: str, body: bytes, media_type: str) -> Any:
        """PUT a manifest under ``ref`` (a tag or its digest); the response (OCI-Subject header)."""
        response = self.request(
            "PUT", f"{repository}/manifests/{ref}", repository, push=True,
            headers={"Content-Type": media_type}, data=body,
        )  # fmt: skip
        if response.status_code not in (200, 201):
            raise self._failed(f"pushing a manifest to {repository}:{ref}", response)
        return response

    def has_blob(self, repository: str, digest: str) -> bool:
        response = self.request("HEAD", f"{repository}/blobs/{digest}", repository, push=True)
        return bool(response.status_code == 200)

    def put_blob(self, repository: str, data: bytes) -> str:
        """Upload ``data`` (monolithic: POST a session, PUT the bytes); its digest."""
        digest = sha256_digest(data)
        if self.has_blob(repository, digest):
            return digest
        started = self.request("POST", f"{repository}/blobs/uploads/", repository, push=True)
        location = started.headers.get("Location")
        if started.status_code != 202 or not location:
            raise self._failed(f"starting an upload to {repository}", started)
        if location.startswith("/"):
            location = self.url + location
        joiner = "&" if "?" in location else "?"
        done = self.request(
            "PUT", "", repository, push=True, url=f"{location}{joiner}digest={digest}",
            headers={"Content-Type": "application/octet-stream"}, data=data,
        )  # fmt: skip
        if done.status_code != 201:
            raise self._failed(f"uploading {digest} to {repository}", done)
        return digest

    def get_blob(self, repository: str, digest: str) -> bytes:
        response = self.request("GET", f"{repository}/blobs/{digest}", repository)
        if response.status_code != 200:
            raise self._failed(f"reading {repository}@{digest}", response)
        body = bytes(response.content)
        if sha256_digest(body) != digest:
            raise BuildFailedError(f"{self.registry}/{repository}@{digest}: the registry sent other bytes")
        return body

    def referrers(self, repository: str, digest: str, artifact_type: str | None = None) -> bytes | None:
        """The referrers API's index for ``digest``; None where the registry has no such API (404)."""
        params = {"artifactType": artifact_type} if artifact_type else None
        response = self.request(
            "GET",
            f"{repository}/referrers/{digest}",
            repository,
            params=params,
            headers={"Accept": OCI_INDEX},
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._failed(f"listing the referrers of {repository}@{digest}", response)
        return bytes(response.content)
