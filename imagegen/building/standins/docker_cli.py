"""The Docker commands stand-ins are made with: the plain CLI, run as subprocesses.

Plain ``docker run`` + ``docker commit`` (not a Dockerfile) for the apt steps, so the host CA
bundle can be bind-mounted for apt (HTTPS mirrors behind an intercepting proxy) without ending
up in any layer: tests check that a proxy CA never reaches a runtime image. Debian's client
(/usr/bin/docker) matches Debian's dockerd and has BuildKit; any client works for the rest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagegen.building.standins.plan import LABEL_KEY, REVISION, REVISION_KEY
from imagegen.errors import BuildFailedError, EngineUnavailableError

DEBIAN_CLIENT = Path("/usr/bin/docker")
LOG_TAIL_LINES = 30


def docker_binary(env: Mapping[str, str]) -> str:
    """Debian's client where there is one, else the first ``docker`` on PATH."""
    if os.access(DEBIAN_CLIENT, os.X_OK):
        return str(DEBIAN_CLIENT)
    found = shutil.which("docker", path=env.get("PATH"))
    if found is None:
        raise EngineUnavailableError(
            "no docker client on PATH", hint="run scripts/ensure-docker.sh (or install docker.io) first"
        )
    return found


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_logged(
    command: Sequence[str],
    log: Path,
    what: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> None:
    """Run ``command`` with its output appended to ``log``; BuildFailedError (1) with the log's
    tail when it fails."""
    with log.open("ab") as out:
        try:
            done = subprocess.run(
                list(command),
                stdout=out,
                stderr=subprocess.STDOUT,
                input=stdin,
                env=None if env is None else dict(env),
                check=False,
            )
        except OSError as exc:
            raise BuildFailedError(f"{what}: cannot run {command[0]}: {exc.strerror}") from None
    if done.returncode != 0:
        raise BuildFailedError(
            f"{what} failed (exit {done.returncode}); the log ends:\n{log_tail(log)}",
            hint=f"the whole log: {log}",
        )


@dataclass(frozen=True)
class Docker:
    """The engine, through one client binary."""

    binary: str
    env: Mapping[str, str]

    @classmethod
    def connect(cls, env: Mapping[str, str]) -> Docker:
        """The client, once the daemon answers; EngineUnavailableError (3) otherwise."""
        docker = cls(docker_binary(env), env)
        done = subprocess.run([docker.binary, "info"], capture_output=True, env=dict(env), check=False)
        if done.returncode != 0:
            raise EngineUnavailableError(
                "no Docker daemon answers", hint="run scripts/ensure-docker.sh first"
            )
        return docker

    def revision(self, tag: str) -> str | None:
        """The stand-in revision label of ``tag``; None when the image is not here."""
        done = subprocess.run(
            [
                self.binary,
                "image",
                "inspect",
                "--format",
                f'{{{{ index .Config.Labels "{REVISION_KEY}" }}}}',
                tag,
            ],
            capture_output=True,
            text=True,
            env=dict(self.env),
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    def current(self, tag: str) -> bool:
        return self.revision(tag) == REVISION

    def run(
        self, args: Sequence[str], log: Path, what: str, stdin: bytes | None = None, buildkit: bool = False
    ) -> None:
        env = {**self.env, "DOCKER_BUILDKIT": "1"} if buildkit else self.env
        run_logged([self.binary, *args], log, what, env, stdin)

    def derive(
        self,
        *,
        tag: str,
        parent: str,
        kind: str,
        script: str,
        args: Sequence[str],
        changes: Sequence[str],
        ca_bundle: Path | None,
        log: Path,
        container: str,
    ) -> None:
        """Run ``script`` (sh, with ``args``) in a container of ``parent`` with the CA mounted,
        then commit it as ``tag`` with the stand-in labels and ``changes``."""
        subprocess.run(
            [self.binary, "rm", "-f", container], capture_output=True, env=dict(self.env), check=False
        )
        try:
            self.run(
                [
                    "run",
                    "--name",
                    container,
                    # The CA is mounted, never copied: no layer holds it (the empty mount
                    # point is all `docker commit` keeps).
                    *(["-v", f"{ca_bundle}:/run/host-ca.crt:ro"] if ca_bundle is not None else []),
                    parent,
                    "sh",
                    "-euc",
                    # Exported in the script, not `docker run -e`: `docker commit` keeps the
                    # container's environment, and images built on the stand-ins would inherit it.
                    "export DEBIAN_FRONTEND=noninteractive\n" + script,
                    "standin",
                    *args,
                ],
                log,
                f"making {tag}",
            )
            commit = [
                "commit",
                "--change",
                'CMD ["bash"]',
                "--change",
                f"LABEL {LABEL_KEY}={kind}",
                "--change",
                f"LABEL {REVISION_KEY}={REVISION}",
            ]
            for change in changes:
                commit += ["--change", change]
            self.run([*commit, container, tag], log, f"committing {tag}")
        finally:
            subprocess.run(
                [self.binary, "rm", "-f", container], capture_output=True, env=dict(self.env), check=False
            )
