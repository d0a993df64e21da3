"""`-o` onto what is not a regular file: a device or a FIFO is written to, never replaced by a
renamed temporary file (`-o /dev/null` as root once replaced the machine's /dev/null); a FIFO
with no reader, a socket or a block device is refused at once (exit 2), and left as it was."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from imagegen import files
from imagegen.errors import BadInputError
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import render
from tests.unit.contract import DOCKERFILE, assert_reported, invoke

REPO = Path(__file__).resolve().parents[3]
RENDERED = render(build_spec(SpecInput(cpu=True, ops="cpu_adam")))
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")


def _imagegen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own: a write that blocks fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-m", "imagegen", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, "IMAGEGEN_DEBUG": ""},
    )  # fmt: skip


@pytest.fixture
def null_device(tmp_path: Path) -> Path:
    """A copy of /dev/null (character device 1:3) that the test may write to."""
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _read_in_background(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader of ``fifo`` to its end, as `cat FIFO` would be; what it read, once joined."""
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


@needs_root
def test_dockerfile_output_onto_a_device_writes_through_it(workdir: Path, null_device: Path) -> None:
    result = invoke([*DOCKERFILE, "-o", str(null_device)])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(null_device.lstat().st_mode)
    assert null_device.lstat().st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in null_device.parent.iterdir()) == ["null"]  # no temporary file left


@needs_root
@pytest.mark.parametrize("data", ["text\n", b"\xffbytes\n"])
def test_write_atomic_onto_a_device_keeps_the_device(null_device: Path, data: str | bytes) -> None:
    files.write_atomic(null_device, data)
    assert stat.S_ISCHR(null_device.lstat().st_mode)


def test_dockerfile_output_onto_a_fifo_reaches_its_reader(fifo: Path) -> None:
    thread, got = _read_in_background(fifo)
    result = invoke([*DOCKERFILE, "-o", str(fifo)])
    assert result.exit_code == 0, result.output
    thread.join(timeout=30)
    assert got == [RENDERED.encode()]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_fifo_without_a_reader_is_refused_at_once(fifo: Path) -> None:
    done = _imagegen(*DOCKERFILE, "-o", str(fifo))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "no process is reading it" in done.stderr and "hint: " in done.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_write_if_changed_onto_a_fifo_without_a_reader_does_not_block(fifo: Path) -> None:
    raised: list[BaseException] = []

    def write() -> None:
        try:
            files.write_if_changed(fifo, "text\n")
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "write_if_changed blocked on a FIFO that no process reads"
    assert len(raised) == 1 and isinstance(raised[0], BadInputError), raised
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_output_to_dev_stdout_reaches_a_pipe() -> None:
    done = _imagegen(*DOCKERFILE, "-o", "/dev/stdout")
    assert done.returncode == 0, done.stderr
    assert done.stdout == RENDERED


def test_a_socket_is_refused_and_kept(workdir: Path) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        assert_reported(invoke([*DOCKERFILE, "-o", "sock"]), fragment="socket")
        assert stat.S_ISSOCK(Path("sock").lstat().st_mode)


@needs_root
def test_a_block_device_is_refused_and_kept(workdir: Path) -> None:
    # A loop device's number that no loop device uses: nothing could be written there anyway.
    os.mknod("disk", stat.S_IFBLK | 0o600, os.makedev(7, 255))
    assert_reported(invoke([*DOCKERFILE, "-o", "disk"]), fragment="block device")
    assert stat.S_ISBLK(Path("disk").lstat().st_mode)
    assert sorted(p.name for p in workdir.iterdir()) == ["disk"]


@needs_root
def test_a_link_to_a_device_is_written_through(workdir: Path, null_device: Path) -> None:
    Path("link").symlink_to(null_device)
    assert invoke([*DOCKERFILE, "-o", "link"]).exit_code == 0
    assert Path("link").is_symlink() and stat.S_ISCHR(null_device.lstat().st_mode)
