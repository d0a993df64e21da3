"""The files a user names: written without leaving half-written ones (and without touching
unchanged ones, or replacing what is not a file), read only when they are regular files of a
bounded size.

This is where OSError from writing output and reading named inputs enters imagegen, so it is
translated here, once, into a BadInputError (exit 2) that names the path and what to do: the
output location and the input file are the user's input.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from imagegen.errors import BadInputError

# Hints by errno, for the failures a user can fix by choosing another path.
_HINTS = {
    errno.EACCES: "pick a folder you can write to, or fix its permissions",
    errno.EPERM: "pick a folder you can write to, or fix its permissions",
    errno.EROFS: "that file system is read-only: pick another folder",
    errno.ENOSPC: "the disk is full: free some space or pick another folder",
    errno.EDQUOT: "the disk quota is used up: free some space or pick another folder",
    errno.ENAMETOOLONG: "use a shorter path: a file name has at most 255 bytes on most file systems",
}


def _kind(path: Path) -> str | None:
    """The kind of ``path``: "dir", "other", or None when missing or not even stat-able."""
    try:
        return "dir" if stat.S_ISDIR(path.stat().st_mode) else "other"
    except OSError:
        return None


def output_error(path: Path, exc: OSError) -> BadInputError:
    """The one message for an OSError met while writing ``path``."""
    if exc.errno == errno.EISDIR or _kind(path) == "dir":
        return BadInputError(f"cannot write {path}: it is a directory", hint="name a file to write instead")
    parent = path.parent
    if exc.errno == errno.ENOENT and _kind(parent) is None:
        return BadInputError(
            f"cannot write {path}: the folder {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}), or fix the path",
        )
    if exc.errno == errno.ENOTDIR or _kind(parent) == "other":
        return BadInputError(
            f"cannot write {path}: a part of that path is a file, not a folder",
            hint="fix the path, or move that file out of the way",
        )
    reason = exc.strerror or str(exc)
    hint = _HINTS.get(exc.errno or 0, "check the path, its permissions and the free space")
    return BadInputError(f"cannot write {_shown(path)}: {reason.lower()}", hint=hint)


def _shown(path: Path) -> str:
    """``path`` for a message: a name too long for the file system is cut, not printed whole."""
    text = str(path)
    return text if len(text) <= 240 else text[:120] + "..." + text[-40:]


def stat_input(path: Path, what: str) -> os.stat_result | None:
    """``stat(path)`` of a path the user named: None when nothing is there.

    A path the file system cannot even look up (a name longer than it allows, a loop of
    symbolic links, a folder we may not search) is bad input naming ``what`` (``-o``,
    ``--out``, ``--op-source``), not an OSError escaping as a traceback.
    """
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        hint = _HINTS.get(exc.errno or 0, "check the path and its permissions")
        raise BadInputError(f"cannot use {what} {_shown(path)}: {reason}", hint=hint) from None


# Hints by errno, for the failures to read a named file.
_READ_HINTS = {
    errno.EACCES: "fix its permissions, or name a file you can read",
    errno.EPERM: "fix its permissions, or name a file you can read",
    errno.ENAMETOOLONG: "use a shorter path: a file name has at most 255 bytes on most file systems",
    errno.ELOOP: "a symbolic link in the path points back at itself: fix the link",
}
_NODE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _bytes(count: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _input_problem(mode: int, size: int, what: str, limit: int) -> str | None:
    """What makes a file of ``mode`` and ``size`` no input to read, or None when it is one."""
    if stat.S_ISDIR(mode):
        return "it is a directory, not a file"
    if not stat.S_ISREG(mode):
        return f"it is {_NODE_KINDS.get(stat.S_IFMT(mode), 'no file')}, not a regular file"
    if size > limit:
        return f"it has {size} bytes; {what} is at most {_bytes(limit)}"
    return None


def read_input(path: Path, what: str, *, limit: int, hint: str) -> bytes:
    """The bytes of ``path``, a file the user named as ``what`` (``the key``), at most ``limit``.

    Only a regular file is read: reading a FIFO waits for a writer, for ever when there is none,
    and a device (/dev/zero) or a file larger than any such input would read without bound. So
    the file is looked at before it is read, again once open (O_NONBLOCK: even a FIFO swapped in
    meanwhile cannot block the open), and never more than ``limit`` + 1 bytes are read.

    Raises BadInputError (exit 2) naming the path and what is wrong, with ``hint`` (what such a
    file should be) unless the failure has a hint of its own (a name too long, permissions).
    """
    problem: str | None
    try:
        before = os.stat(path)
        problem = _input_problem(before.st_mode, before.st_size, what, limit)
        if problem is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            try:
                opened = os.fstat(fd)
                problem = _input_problem(opened.st_mode, opened.st_size, what, limit)
                chunks: list[bytes] = []
                read = 0
                while problem is None and (chunk := os.read(fd, limit + 1 - read)):
                    chunks.append(chunk)
                    read += len(chunk)
                    if read > limit:  # it grew, or says less than it holds (/proc, a FUSE file)
                        problem = f"it has more than {_bytes(limit)}; {what} is at most that"
            finally:
                os.close(fd)
    except FileNotFoundError:
        problem = "it does not exist"
    except OSError as exc:
        problem = (exc.strerror or str(exc)).lower()
        hint = _READ_HINTS.get(exc.errno or 0, hint)
    if problem is not None:
        raise BadInputError(f"cannot read {what} {_shown(path)}: {problem}", hint=hint)
    return b"".join(chunks)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place.

    A reader (or a build) sees the old file or the new one, never a partial one, even if
    this process is killed half-way; on failure nothing is left behind. The parent folder
    must exist. A new file gets the usual mode (0666 less the umask); a replaced file keeps
    its mode. A symbolic link is written through, so the link stays a link.

    Only a regular file (or nothing) is replaced: a rename over a device or a FIFO would
    swap the node itself for a file (``-o /dev/null`` as root once replaced the machine's
    /dev/null). Those are written to in place instead (``-o /dev/stdout``, ``-o /dev/null``,
    a FIFO a reader waits on); see ``_write_in_place`` for what is refused.

    Raises BadInputError (exit 2) when ``path`` cannot be written.
    """
    payload = data.encode() if isinstance(data, str) else data
    try:
        # stat follows links: what matters is what the writing lands on, not the link.
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:  # nothing there, or a link to nothing: a new file
        mode = None
    except OSError as exc:  # a name too long, a symlink loop, a folder we may not search
        raise output_error(path, exc) from None
    if mode is not None and stat.S_ISDIR(mode):
        raise output_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    if mode is not None and not stat.S_ISREG(mode):
        _write_in_place(path, payload, mode)
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    keep_mode = None if mode is None else stat.S_IMODE(mode)
    # The name cut short, so a name near the file system's limit still gets a temporary one.
    tmp = path.parent / f".{path.name[:200]}.{secrets.token_hex(4)}.tmp"
    try:
        # 0666: the kernel applies the umask (and a folder's default ACL), as for any new file;
        # mkstemp's 0600 would leave every written file private. O_EXCL: never write through
        # a file someone else put at the temporary name.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise output_error(path, exc) from None
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                if keep_mode is not None:
                    os.fchmod(handle.fileno(), keep_mode)
                handle.write(payload)
            os.replace(tmp, path)
        except OSError as exc:
            raise output_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# Nodes that are never written: bytes written to a disk's device would overwrite what it holds.
_REFUSED_NODES = {
    stat.S_IFBLK: ("a block device", "name a file, or '-' for standard output"),
    stat.S_IFSOCK: ("a socket", "name a file, or '-' for standard output"),
}


def refused_node(path: Path, mode: int, hint: str | None = None) -> BadInputError | None:
    """The error for an output ``path`` whose node (``mode``, as ``os.stat`` gives it) is never
    written, a block device or a socket (``hint``: the option's own); None for any other."""
    refused = _REFUSED_NODES.get(stat.S_IFMT(mode))
    if refused is None:
        return None
    return BadInputError(f"cannot write {_shown(path)}: it is {refused[0]}", hint=hint or refused[1])


def _write_in_place(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` into the character device or FIFO at ``path``, which stays what it is.

    Opened without O_CREAT or O_TRUNC (neither means anything for these), and with O_NONBLOCK:
    opening a FIFO for writing otherwise waits, for ever, until some process opens it to read;
    with it, a FIFO nobody reads fails at once (ENXIO), and is refused with that reason. The
    writes themselves block as usual, so a slow reader gets everything.
    """
    refused = refused_node(path, mode)
    if refused is not None:
        raise refused
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            raise BadInputError(
                f"cannot write {_shown(path)}: it is a FIFO and no process is reading it",
                hint=f"start its reader first (e.g. `cat {_shown(path)} &`), or name a file",
            ) from None
        raise output_error(path, exc) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise output_error(path, exc) from None
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p path``, with the OSError translated as for writing a file there."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder should be
        raise BadInputError(
            f"cannot create the folder {path}: a file is in the way",
            hint="pick another folder, or move that file out of the way",
        ) from None
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        hint = _HINTS.get(exc.errno or 0, "check the path, its permissions and the free space")
        raise BadInputError(f"cannot create the folder {_shown(path)}: {reason}", hint=hint) from None


def write_if_changed(path: Path, text: str) -> bool:
    """Write only when the content differs, so mtimes and build caches stay warm. True if written.

    Only a regular file is read to compare: reading a FIFO would wait for a writer, and a device
    has no content to compare with; those are written as ``write_atomic`` writes them.
    """
    try:
        if stat.S_ISREG(os.stat(path).st_mode) and path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    except OSError as exc:
        raise output_error(path, exc) from None
    write_atomic(path, text)
    return True
