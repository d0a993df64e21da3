"""Context slots: a build context staged at a path earlier builds used, one build per slot."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagegen.building import staging
from imagegen.building.staging import context_slot, slots_root, staged_context
from imagegen.errors import BuildFailedError
from imagegen.imagespec.spec import SpecInput, build_spec

REPO = Path(__file__).resolve().parents[4]


def test_a_slot_is_the_same_path_each_time_and_empty_between_builds(tmp_path: Path) -> None:
    with context_slot(tmp_path) as first:
        (first / "kept-for-this-build").write_text("x")
    assert not first.exists()
    with context_slot(tmp_path) as second:
        assert second == first == tmp_path / "slot-0"
        assert list(second.iterdir()) == []


def test_concurrent_builds_take_different_slots(tmp_path: Path) -> None:
    with context_slot(tmp_path) as a, context_slot(tmp_path) as b:
        assert (a.name, b.name) == ("slot-0", "slot-1")
        (a / "only-a").write_text("a")
        assert list(b.iterdir()) == []
    with context_slot(tmp_path) as again:
        assert again.name == "slot-0"


def test_a_slot_locked_by_another_process_is_skipped(tmp_path: Path) -> None:
    # flock locks belong to an open file: another open of the same file conflicts as
    # another process's would.
    with open(tmp_path / "slot-0.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with context_slot(tmp_path) as slot:
            assert slot.name == "slot-1"


def test_what_a_killed_build_left_is_removed_before_use(tmp_path: Path) -> None:
    leftover = tmp_path / "slot-0" / "kernels"
    leftover.mkdir(parents=True)
    (leftover / "stale.cpp").write_text("// from a build that was killed")
    with context_slot(tmp_path) as slot:
        assert slot == tmp_path / "slot-0" and list(slot.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to a read-only folder")
def test_an_unwritable_cache_falls_back_to_a_temporary_folder(tmp_path: Path) -> None:
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with context_slot(tmp_path / "contexts") as slot:
            assert not slot.is_relative_to(tmp_path) and list(slot.iterdir()) == []
        assert not slot.exists()
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_an_unusable_cache_path_falls_back_to_a_temporary_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    with context_slot(blocker / "contexts") as slot:
        assert not slot.is_relative_to(tmp_path) and slot.is_dir()
    assert not slot.exists()


def test_slots_live_in_the_xdg_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert slots_root() == tmp_path / "imagegen" / "contexts"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert slots_root() == Path.home() / ".cache" / "imagegen" / "contexts"


def test_staged_context_uses_a_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = build_spec(SpecInput(cpu=True, ops="all", stable_headers="own"))
    with staged_context(spec, REPO) as first:
        assert (first / "setup.py").is_file()
    with staged_context(spec, REPO) as second:
        assert second == first == tmp_path / "imagegen" / "contexts" / "slot-0"
    assert not second.exists()


def test_a_file_system_without_locks_falls_back_to_a_temporary_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_locks(*_: Any) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(staging.fcntl, "flock", no_locks)
    with context_slot(tmp_path) as slot:
        assert not slot.is_relative_to(tmp_path) and slot.is_dir()


def test_a_leftover_that_cannot_be_removed_moves_to_the_next_slot(tmp_path: Path) -> None:
    (tmp_path / "slot-0").write_text("a file where the slot folder goes, and rmtree leaves files")
    with context_slot(tmp_path) as slot:
        assert slot == tmp_path / "slot-1"


def test_staging_that_fails_is_one_build_error_naming_the_slot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def disk_full(root: Path, dest: Path) -> Path:
        (dest / "setup.py").write_text("partly copied")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(staging, "copy_build_inputs", disk_full)
    spec = build_spec(SpecInput(cpu=True, ops="all", stable_headers="own"))
    slot = tmp_path / "imagegen" / "contexts" / "slot-0"
    with pytest.raises(BuildFailedError) as failed, staged_context(spec, REPO):
        pass
    assert failed.value.exit_code == 1
    assert str(slot) in failed.value.message and "No space left on device" in failed.value.message
    assert failed.value.hint is not None and "XDG_CACHE_HOME" in failed.value.hint
    assert not slot.exists()  # nothing half-written left behind
