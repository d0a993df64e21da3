"""Files a user names to be read (`--key`, `--sign-key`, `--ca-cert`, GOOGLE_APPLICATION_CREDENTIALS,
STANDIN_CA, DOCKER_CONFIG's config.json) are regular files of bounded size: a FIFO would block the
read for ever and a device or an endless file would read without bound, so each is refused before
it is read (exit 2), with the path and what is wrong with it."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from imagegen.building.standins.make import ca_bundle
from imagegen.errors import BadInputError
from imagegen.files import read_input
from imagegen.imagespec.compile_cache import build_secrets, parse
from imagegen.registry import auth

REPO = Path(__file__).resolve().parents[4]
LONG = "k" * 300  # longer than any file system's name limit
NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing answers there: the checks must not need it


def _limit_memory() -> None:
    # An unbounded read of an endless file fails the test (MemoryError) instead of the machine.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _imagegen(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, bounded in time and memory: a read that blocks or never
    ends fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-m", "imagegen", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, preexec_fn=_limit_memory,
        env={**os.environ, **NO_ENGINE, "IMAGEGEN_DEBUG": ""},
    )  # fmt: skip


def _assert_refused(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], done.stderr
    assert "hint: " in done.stderr


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "key.fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def huge(tmp_path: Path) -> Path:
    """A sparse file of 64 MiB: no key, certificate bundle or credentials file is that large."""
    path = tmp_path / "huge.pem"
    with open(path, "wb") as handle:
        handle.truncate(64 << 20)
    return path


def _key(tmp_path: Path) -> Path:
    path = tmp_path / "key.pem"
    path.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "imagegen:cpu", "--key", "{path}"],
        ["build", "--cpu", "--ops", "cpu_adam", "--sign-key", "{path}"],
        ["dockerfile", "--cpu", "--ops", "cpu_adam", "--ca-cert", "{path}"],
    ],
    ids=["key", "sign-key", "ca-cert"],
)
@pytest.mark.parametrize(
    ("target", "fragment"),
    [("fifo", "not a regular file"), ("/dev/zero", "not a regular file"), ("huge", "bytes")],
)
def test_a_named_file_that_is_no_bounded_regular_file_is_refused(
    request: pytest.FixtureRequest, args: list[str], target: str, fragment: str
) -> None:
    path = target if target.startswith("/") else str(request.getfixturevalue(target))
    _assert_refused(_imagegen(*(a.replace("{path}", path) for a in args)), fragment)


def test_a_fifo_key_is_refused_with_json_too(fifo: Path) -> None:
    done = _imagegen("verify", "imagegen:cpu", "--key", str(fifo), "--json")
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert "not a regular file" in error["message"] and error["hint"] and error["exit_code"] == 2
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_key_with_a_name_too_long_is_refused(tmp_path: Path) -> None:
    _assert_refused(_imagegen("verify", "imagegen:cpu", "--key", str(tmp_path / LONG)), "file name too long")


def test_read_input_reads_a_regular_file_and_names_what_is_wrong(tmp_path: Path, fifo: Path) -> None:
    key = _key(tmp_path)
    assert read_input(key, "the key", limit=1 << 20, hint="h") == key.read_bytes()
    cases = {
        tmp_path / "none.pem": "does not exist",
        tmp_path: "is a directory",
        fifo: "is a FIFO, not a regular file",
        Path("/dev/zero"): "is a character device, not a regular file",
        key: f"has {key.stat().st_size} bytes",  # over a limit below its size
    }
    for path, fragment in cases.items():
        with pytest.raises(BadInputError, match=fragment) as caught:
            read_input(path, "the key", limit=16, hint="h")
        assert caught.value.hint


def test_a_gcs_key_file_is_a_bounded_regular_file(tmp_path: Path, fifo: Path, huge: Path) -> None:
    gcs = parse("gcs://bucket/prefix")
    for path, fragment in ((fifo, "not a regular file"), (huge, "bytes"), (tmp_path / LONG, "too long")):
        env = {"GOOGLE_APPLICATION_CREDENTIALS": str(path)}
        with pytest.raises(BadInputError, match=fragment), build_secrets(gcs, env):
            pass
    key = tmp_path / "sa.json"
    key.write_text('{"type": "service_account"}')
    with build_secrets(gcs, {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}) as found:
        assert list(found.values()) == [key]


def test_standin_ca_is_a_bounded_regular_file(tmp_path: Path, fifo: Path, huge: Path) -> None:
    for path, fragment in ((fifo, "not a regular file"), (huge, "bytes"), (tmp_path / LONG, "too long")):
        with pytest.raises(BadInputError, match=fragment):
            ca_bundle({"STANDIN_CA": str(path)})
    bundle = tmp_path / "ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert ca_bundle({"STANDIN_CA": str(bundle)}) == bundle


def test_a_docker_config_that_is_a_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")
    raised: list[BaseException] = []

    def read() -> None:
        try:
            auth.docker_config({"DOCKER_CONFIG": str(tmp_path)})
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "reading DOCKER_CONFIG's config.json blocked on a FIFO"
    assert len(raised) == 1 and isinstance(raised[0], BadInputError), raised
    assert "DOCKER_CONFIG" in str(raised[0]) or "config.json" in str(raised[0])
