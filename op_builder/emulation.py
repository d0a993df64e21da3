"""Whether this process runs under a user-mode emulator, which some self-tests cannot run under.

An arm64 image built on an amd64 machine is checked there through qemu-user (binfmt_misc). qemu-user
passes the host's ``/proc/cpuinfo`` through unchanged, so a process that is ``aarch64`` by
``uname -m`` reads an x86 CPU there (``vendor_id``, ``flags``), and the reverse. qemu-user has no
Linux AIO system calls (``io_setup`` answers ENOSYS), so ``async_io``'s self-test cannot run there.
"""

from __future__ import annotations

import platform

# The /proc/cpuinfo keys only one ISA family's kernel writes.
_X86_KEYS = ("vendor_id", "flags")
_ARM_KEYS = ("CPU implementer", "Features")


def _keys(cpuinfo: str) -> set[str]:
    return {line.split(":", 1)[0].strip() for line in cpuinfo.splitlines() if ":" in line}


def emulator(machine: str | None = None, cpuinfo: str | None = None) -> str | None:
    """``qemu-user`` when this process's machine (``uname -m``) is not the CPU ``/proc/cpuinfo``
    describes; None when they agree or cannot be told apart."""
    machine = platform.machine() if machine is None else machine
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as handle:
                cpuinfo = handle.read()
        except OSError:
            return None
    keys = _keys(cpuinfo)
    if machine in ("aarch64", "arm64") and any(k in keys for k in _X86_KEYS):
        return "qemu-user"
    if machine in ("x86_64", "amd64") and any(k in keys for k in _ARM_KEYS):
        return "qemu-user"
    return None
