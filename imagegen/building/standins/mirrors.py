"""The Debian mirrors a stand-in base is made from: the host's own, as apt reads its sources.

``apt-get indextargets`` lists every configured source (sources.list, sources.list.d/*.list and
deb822 *.sources; ``Enabled: no`` and deb-src entries skipped), so a machine behind a corporate
mirror builds the bases from that mirror without edits; ``APT_CONFIG`` points apt at other
sources. A Debian archive is told from other repositories (a vendor's, Ubuntu's on an Ubuntu
host) by its suite: the one built, the host's codename on a Debian host, or a Debian alias such
as ``stable``. The archive serves every suite, so the bookworm host's entry also names the mirror
of trixie (the CUDA 12.4 stand-in). ``STANDIN_MIRROR`` / ``STANDIN_SECURITY_MIRROR`` override.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imagegen import settings
from imagegen.errors import BuildFailedError

# Debian's names for its suites besides the codenames; "-updates" / "-backports" entries are
# skipped: the archive has a plain entry too.
DEBIAN_ALIASES: tuple[str, ...] = ("stable", "oldstable", "testing", "unstable", "sid")
SOURCES = "this host's apt sources (/etc/apt/sources.list, sources.list.d/*.list, *.sources)"
_FORMAT = "$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)"
_SECURITY_SUFFIX = re.compile(r"(-security|/updates)$")


@dataclass(frozen=True)
class Mirrors:
    """The archive and its security archive, without a trailing slash."""

    main: str
    security: str


def debian_mirror(kind: str, suites: Iterable[str], targets: str) -> str | None:
    """The first http(s) ``deb`` entry of ``targets`` (apt's indextargets lines) carrying main.

    ``kind`` "main": its suite is one of ``suites``; "security": one of those with -security
    (or the old /updates).
    """
    debian = set(suites)
    for line in targets.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[0] != "deb" or fields[3] != "main":
            continue
        uri, suite = fields[1], fields[2]
        if not re.match(r"https?://", uri):
            continue
        if kind == "security":
            suite, found = _SECURITY_SUFFIX.subn("", suite)
            if not found:
                continue
        elif "-" in suite or "/" in suite:
            continue
        if suite in debian:
            return uri.rstrip("/")
    return None


def host_suites(suite: str, os_release: str) -> tuple[str, ...]:
    """The suites that mark a Debian archive: ``suite``, the aliases, a Debian host's codename."""
    fields = dict(
        line.split("=", 1) for line in os_release.splitlines() if "=" in line and not line.startswith("#")
    )
    codename = fields.get("VERSION_CODENAME", "").strip().strip('"')
    is_debian = fields.get("ID", "").strip().strip('"') == "debian"
    return (suite, *DEBIAN_ALIASES, *((codename,) if is_debian and codename else ()))


def apt_targets(env: Mapping[str, str]) -> str:
    """apt's own reading of the configured sources; empty where there is no apt."""
    try:
        done = subprocess.run(
            # --no-release-info: every configured source, whether or not `apt-get update` ran.
            ["apt-get", "indextargets", "--no-release-info", "--format", _FORMAT],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return "\n".join(sorted(set(done.stdout.splitlines()))) if done.returncode == 0 else ""


def resolve(suite: str, env: Mapping[str, str], os_release: Path = Path("/etc/os-release")) -> Mirrors:
    """The mirrors for ``suite``: the environment's, else the host's. Raises BuildFailedError (1)
    naming the variable to set when the host's sources have none."""
    main = env.get(settings.STANDIN_MIRROR.name, "").strip()
    security = env.get(settings.STANDIN_SECURITY_MIRROR.name, "").strip()
    if not (main and security):
        try:
            release = os_release.read_text()
        except OSError:
            release = ""
        suites = host_suites(suite, release)
        targets = apt_targets(env)
        main = main or debian_mirror("main", suites, targets) or ""
        security = security or debian_mirror("security", suites, targets) or ""
    if not main:
        raise BuildFailedError(
            f"no Debian mirror for {suite} in {SOURCES}",
            hint=f"set STANDIN_MIRROR to one (the URL a 'deb URL {suite} main' line would name)",
        )
    if not security:
        raise BuildFailedError(
            f"no Debian security mirror for {suite}-security in {SOURCES}",
            hint="set STANDIN_SECURITY_MIRROR to one "
            f"(the URL a 'deb URL {suite}-security main' line would name)",
        )
    return Mirrors(main, security)
