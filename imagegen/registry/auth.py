"""Credentials for a registry, found where ``docker login`` put them, and the token dance.

Docker's ``config.json`` (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``) holds
per registry either ``auth`` (base64 ``user:password``) or nothing, its secret then being in a
credential helper (``credHelpers[host]``, else ``credsStore``): ``docker-credential-<name> get``
reads the host on stdin and answers ``{"Username", "Secret"}``. A registry answering 401 says in
``WWW-Authenticate`` how to authenticate: ``Basic`` (send the credentials) or ``Bearer
realm=...,service=...,scope=...`` (ask the realm for a token, with the credentials when there are
some, anonymously otherwise), as the distribution token spec describes.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagegen import settings
from imagegen.errors import BadInputError
from imagegen.files import read_input

# Docker Hub's credentials are stored under its v1 index address.
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str
    secret: str

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.secret}".encode()).decode()


# A config holds a few entries per registry; a file far larger is not one, and must not be read
# without bound.
CONFIG_LIMIT = 16 << 20


def docker_config(env: Mapping[str, str] = os.environ) -> Mapping[str, Any]:
    """Docker's client configuration (empty when there is none or it is not JSON).

    BadInputError (exit 2) when something other than a readable regular file is there (a FIFO
    would block the read for ever), as for every file a user names.
    """
    folder = env.get(settings.DOCKER_CONFIG.name)
    path = Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"
    if not os.path.exists(path):
        return {}
    hint = "fix or remove it (`docker login` writes it), or point DOCKER_CONFIG at another folder"
    text = read_input(path, "Docker's config file", limit=CONFIG_LIMIT, hint=hint)
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, Mapping) else {}


def _decoded(auth: str, key: str) -> Credentials:
    """An ``auths`` entry's ``auth``: base64 of ``user:password`` in UTF-8, as ``docker login``
    writes it; BadInputError (exit 2) for anything else, which Docker itself refuses too."""
    try:
        user, _, secret = base64.b64decode(auth, validate=True).decode().partition(":")
    except ValueError:  # binascii.Error (not base64), UnicodeDecodeError (not UTF-8)
        raise BadInputError(
            f"Docker's config file has an auth entry for {key} that is not base64 of user:password in UTF-8",
            hint=f"log in again (`docker login {key}`), or fix that entry under auths in config.json",
        ) from None
    return Credentials(user, secret)


def _keys(host: str) -> tuple[str, ...]:
    if host in DOCKER_HUB_KEYS:
        return DOCKER_HUB_KEYS
    return (host, f"https://{host}", f"http://{host}")


def _helper(name: str, host: str) -> Credentials | None:
    try:
        done = subprocess.run(
            [f"docker-credential-{name}", "get"], input=host, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:  # "credentials not found in native keychain": none for this host
        return None
    try:
        answer = json.loads(done.stdout)
        return Credentials(str(answer["Username"]), str(answer["Secret"]))
    except (ValueError, KeyError, TypeError):
        return None


def find_credentials(host: str, config: Mapping[str, Any]) -> Credentials | None:
    """``host``'s credentials from ``config`` (``docker_config``'s), or None (anonymous)."""
    helpers = config.get("credHelpers") or {}
    for key in _keys(host):
        if isinstance(helpers, Mapping) and isinstance(helpers.get(key), str):
            return _helper(helpers[key], key)
    auths = config.get("auths") or {}
    for key in _keys(host):
        entry = auths.get(key) if isinstance(auths, Mapping) else None
        if not isinstance(entry, Mapping):
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            return _decoded(entry["auth"], key)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Credentials(entry["username"], entry["password"])
    store = config.get("credsStore")
    if not isinstance(store, str) or not store:
        return None
    for key in _keys(host):
        found = _helper(store, key)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header: the scheme and its parameters."""

    scheme: str  # "bearer" or "basic", lower-cased
    params: Mapping[str, str]


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


def parse_challenge(header: str) -> Challenge | None:
    """``Bearer realm="https://auth",service="reg",scope="repository:a:pull"`` -> its parts."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {
        m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
        for m in _PARAM.finditer(rest)
    }
    return Challenge(scheme.lower(), {k: v.replace('\\"', '"') for k, v in params.items()})
