"""`make images` and `make image-cuda`: which ops, torch and index an image target builds with.

    python scripts/images.py cpu  [--platform P[,P]] [--ops A,B] [--wheelhouse DIR] [--ca-cert FILE]
                                  [--arm64-torch X.Y.Z] [--arm64-wheelhouse DIR] [--arm64-ops A,B]
                                  [--push REGISTRY/NAME:TAG]
    python scripts/images.py cuda [--cuda X.Y] [--arch LIST] [--torch X.Y.Z] [--torch-index URL]
                                  [--ops A,B] [--ca-cert FILE]
    ... --dry-run                 print the commands, run nothing

An empty value is the same as leaving the option out (the Makefile passes its variables through
as they are, set or not): the default, below, applies. The commands run are ``imagegen``'s (the
one beside this Python), each printed before it runs, as make prints its recipes; the first
that fails ends the run with its exit status. Images are built from the stand-in bases.

- ``cpu``: the CPU image of our CPU ops (op_builder's registry), for ``--platform``
  (linux/amd64 or linux/arm64). For linux/arm64 torch ``--arm64-torch`` is first fetched as an
  aarch64 wheel into ``--arm64-wheelhouse`` from the index this machine's pip uses; the image is
  cross-compiled on linux/amd64 (imagegen's default ``--build-platform``) and keeps every op
  (``--arm64-ops`` picks others): under emulation async_io's self-test is reported not checkable
  rather than failed. The build machine's own CPU torch comes from ``--wheelhouse`` (passed as
  ``--build-wheelhouse``) when there is one. Several platforms (``linux/amd64,linux/arm64``): one
  ``imagegen build`` of both, each platform with its own torch and wheelhouse
  (``--platform-torch``, ``--platform-wheelhouse``) and the same ops. ``--push
  REGISTRY/NAME:TAG``: pushed there after verification (several platforms: each platform's image
  and one image index).
- ``cuda``: the stand-ins of that CUDA, then an image of our GPU ops for the catalog's default
  arch list of that CUDA (or ``--arch``), with the torch build PyPI publishes for it, from the
  index this machine's pip installs from (``scripts/pip_index.py``) unless ``--torch-index``.

Exit status: 0 when every command passed; a failing command's own status (imagegen: 1 build or
verify failed, 2 bad input, 3 no container engine); 1 when pip's index cannot be used; 2 on bad
arguments (argparse's).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(ROOT))  # run from a checkout

from imagegen.imagespec import catalog  # noqa: E402  (found through the path above)

AMD64, ARM64 = "linux/amd64", "linux/arm64"

# torch for the arm64 CPU image: the catalog's default for the CPU on arm64, the newest release
# with an aarch64 CPU build (PyPI's aarch64 wheels are CUDA 13.0 builds from 2.11 on: several GB
# of nvidia-* wheels, and the CPU image's build check refuses them), the one `imagegen build` and
# `imagegen bake` pick there too. download.pytorch.org is not reachable everywhere, so it is
# fetched into a wheelhouse of its own from the index this machine's pip uses.
ARM64_TORCH = catalog.CPU_TARGET.default_torch_for(catalog.ARM64)
ARM64_WHEELHOUSE = ".cache/wheelhouse-linux-arm64"
# The stand-ins' Python and the wheel tags torch's aarch64 wheels carry.
ARM64_WHEEL_PYTHON = "3.11"
ARM64_WHEEL_PLATFORMS = ("manylinux_2_28_aarch64", "manylinux2014_aarch64")

# Local torch wheels (an air-gapped or proxied machine keeps them here) and the CA bundle that
# HTTPS through an intercepting proxy needs; each used only when present.
WHEELHOUSE = Path("/opt/wheels")
CA_CERT = Path("/etc/ssl/certs/ca-certificates.crt")

# CUDA 13.0: this machine's toolkit (the stand-ins' default).
CUDA = "13.0"


def cuda_torch(cuda: str, platform: str = AMD64) -> str:
    """The torch release whose PyPI wheels are a build for ``cuda`` on ``platform``.

    PyPI's torch 2.6.0 Linux wheels are its CUDA 12.4 build; torch 2.15.0's are a CUDA 13.2
    build (``cuda-toolkit==13.2.2``), which 13.0 (an older toolkit of the same major, whose
    stand-ins the ops are compiled with) runs too. On arm64, 2.11.0 (its aarch64 wheel is a CUDA
    13.0 build): the image is checked under qemu here, where 2.15.0's aarch64 build crashes
    (its oneDNN reads the CPU's MIDR_EL1 from sysfs, which qemu-user lacks).
    """
    if cuda == "12.4":
        return "2.6.0"
    return "2.11.0" if platform == ARM64 else "2.15.0"


@dataclass(frozen=True)
class Ops:
    """Our ops by target (from op_builder's registry)."""

    cpu: tuple[str, ...]
    gpu: tuple[str, ...]


def our_ops() -> Ops:
    from op_builder.registry import registry_for

    # Ours only: not an installed op package's (entry points) nor DS_OP_SOURCES'.
    registry = registry_for(())
    builders = [b for name, b in registry.ops.items() if not registry.origins[name].external]
    return Ops(
        cpu=tuple(b.name for b in builders if b.target == "cpu"),
        gpu=tuple(b.name for b in builders if b.target == "gpu"),
    )


def _names(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated list as make passes it; None when empty (the default applies)."""
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    return names or None


def _present(path: Path) -> str | None:
    return str(path) if path.exists() else None


def cpu_commands(args: argparse.Namespace, ops: Ops, imagegen: Sequence[str]) -> list[list[str]]:
    """What `make images` runs for these options (the same on any host)."""
    platform_ = args.platform or AMD64  # imagegen judges any other
    if "," in platform_:
        return several_platforms(args, ops, imagegen)
    wanted = _names(args.ops) or ops.cpu
    ca_cert = args.ca_cert or _present(CA_CERT)
    # The amd64 wheels: the amd64 image's, and the build machine's own CPU torch in an arm64 one.
    amd64_wheelhouse = args.wheelhouse or _present(WHEELHOUSE)
    commands = []
    if platform_ == ARM64:
        torch = args.arm64_torch or ARM64_TORCH
        wheelhouse = args.arm64_wheelhouse or ARM64_WHEELHOUSE
        wanted = _names(args.arm64_ops) or wanted
        commands.append(arm64_wheel_command(torch, wheelhouse))
        sources = ["--torch", torch, "--wheelhouse", wheelhouse]
        # Cross-compiled on linux/amd64 (imagegen's default --build-platform), whose own CPU torch
        # runs the extension builder: from the amd64 wheelhouse when there is one.
        sources += ["--build-wheelhouse", amd64_wheelhouse] if amd64_wheelhouse else []
    else:
        sources = ["--wheelhouse", amd64_wheelhouse] if amd64_wheelhouse else []
    build = [*imagegen, "build", "--cpu", "--platform", platform_, "--ops", ",".join(wanted), "--standins"]
    commands.append(build + sources + (["--ca-cert", ca_cert] if ca_cert else []) + _push(args))
    return commands


def _push(args: argparse.Namespace) -> list[str]:
    return ["--tag", args.push, "--push"] if args.push else []


def arm64_wheel_command(torch: str, wheelhouse: str) -> list[str]:
    """pip download of torch's aarch64 CPU wheel into ``wheelhouse`` (the index this machine's pip uses)."""
    platforms = [arg for tag in ARM64_WHEEL_PLATFORMS for arg in ("--platform", tag)]
    return [
        *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"),
        *("--python-version", ARM64_WHEEL_PYTHON, *platforms, "--dest", wheelhouse, f"torch=={torch}"),
    ]


def several_platforms(args: argparse.Namespace, ops: Ops, imagegen: Sequence[str]) -> list[list[str]]:
    """One ``imagegen build --platform A,B``: torch and wheelhouse per platform, the same ops;
    ``--wheelhouse`` (amd64's) is also the arm64 cross build's ``--build-wheelhouse``."""
    platforms = [p.strip() for p in args.platform.split(",")]
    wanted = _names(args.ops) or ops.cpu
    ca_cert = args.ca_cert or _present(CA_CERT)
    commands: list[list[str]] = []
    per_platform: list[str] = []
    if ARM64 in platforms:
        torch = args.arm64_torch or ARM64_TORCH
        wheelhouse = args.arm64_wheelhouse or ARM64_WHEELHOUSE
        commands.append(arm64_wheel_command(torch, wheelhouse))
        per_platform += [
            "--platform-torch",
            f"{ARM64}={torch}",
            "--platform-wheelhouse",
            f"{ARM64}={wheelhouse}",
        ]
        wanted = _names(args.arm64_ops) or wanted  # one op list for the index
    wheelhouse = args.wheelhouse or _present(WHEELHOUSE)
    # Each platform's spec takes its own wheelhouse (arm64's from --platform-wheelhouse), which a
    # cross build's build wheelhouse defaults to: the amd64 one is named for the arm64 build too.
    wheels = ["--wheelhouse", wheelhouse] if wheelhouse else []
    if wheelhouse and ARM64 in platforms:
        wheels += ["--build-wheelhouse", wheelhouse]
    build = [*imagegen, "build", "--cpu", "--platform", ",".join(platforms), "--ops", ",".join(wanted)]
    build += ["--standins", *per_platform, *wheels]
    commands.append(build + (["--ca-cert", ca_cert] if ca_cert else []) + _push(args))
    return commands


def cuda_commands(args: argparse.Namespace, ops: Ops, index: str, imagegen: Sequence[str]) -> list[list[str]]:
    """What `make image-cuda` runs for these options, with torch from ``index``.

    ``--platform linux/arm64``: the arm64 image, cross-compiled: its devel stage is amd64's CUDA
    stand-in and its runtime stage arm64's, so both are made; the cross build's own (CPU) torch
    comes from the amd64 wheelhouse when there is one.
    """
    cuda = args.cuda or CUDA
    platform_ = args.platform or AMD64
    ca_cert = args.ca_cert or _present(CA_CERT)
    build = [*imagegen, "build", "--cuda", cuda, "--standins", "--ops", ",".join(_names(args.ops) or ops.gpu)]
    build += ["--arch", args.arch] if args.arch else []
    build += ["--torch", args.torch or cuda_torch(cuda, platform_), "--torch-index", index]
    standins = [[*imagegen, "standins", "--cuda", cuda]]
    if platform_ != AMD64:
        standins.append([*imagegen, "standins", "--cuda", cuda, "--platform", platform_])
        wheelhouse = args.wheelhouse or _present(WHEELHOUSE)
        build += ["--platform", platform_, *(["--build-wheelhouse", wheelhouse] if wheelhouse else [])]
    return [*standins, build + (["--ca-cert", ca_cert] if ca_cert else [])]


def imagegen_command() -> list[str]:
    """The venv's ``imagegen`` beside this Python (make's ``$(VENV)/bin/imagegen``)."""
    script = Path(sys.executable).with_name("imagegen")
    return [str(script)] if script.exists() else [sys.executable, "-m", "imagegen"]


def run_all(commands: Iterable[Sequence[str]], dry_run: bool) -> int:
    for command in commands:
        print(shlex.join(command), flush=True)
        if dry_run:
            continue
        code = subprocess.run(command, cwd=ROOT).returncode
        if code:
            return code
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    kinds = top.add_subparsers(dest="kind", required=True)
    cpu = kinds.add_parser("cpu", help="the CPU image of our CPU ops (make images)")
    cpu.add_argument("--platform", help=f"{AMD64} (default), {ARM64}, or both: {AMD64},{ARM64}")
    cpu.add_argument("--ops", help="default: our CPU ops")
    cpu.add_argument("--wheelhouse", help=f"wheels installed first (default: {WHEELHOUSE} when present)")
    cpu.add_argument("--arm64-torch", help=f"torch of the arm64 image (default {ARM64_TORCH})")
    cpu.add_argument("--arm64-wheelhouse", help=f"where its wheel is fetched (default {ARM64_WHEELHOUSE})")
    cpu.add_argument("--arm64-ops", help="ops of the arm64 image (default: --ops)")
    cpu.add_argument("--push", help="REGISTRY/NAME:TAG to push to after verification (default: no push)")
    cuda = kinds.add_parser("cuda", help="a CUDA image of our GPU ops (make image-cuda)")
    cuda.add_argument("--cuda", help=f"the CUDA version of the stand-ins (default {CUDA})")
    cuda.add_argument("--arch", help="the arch list (default: the catalog's for that CUDA)")
    cuda.add_argument("--torch", help="the torch release (default: PyPI's build for that CUDA)")
    cuda.add_argument("--torch-index", help="where torch comes from (default: this machine's pip index)")
    cuda.add_argument("--ops", help="default: our GPU ops")
    cuda.add_argument("--platform", help=f"{AMD64} (default) or {ARM64} (cross-compiled on this machine)")
    cuda.add_argument("--wheelhouse", help=f"an arm64 build's own torch (default: {WHEELHOUSE} when present)")
    for sub in (cpu, cuda):
        sub.add_argument("--ca-cert", help=f"CA bundle for the build (default: {CA_CERT} when present)")
        sub.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    imagegen = imagegen_command()
    if args.kind == "cpu":
        return run_all(cpu_commands(args, our_ops(), imagegen), args.dry_run)
    sys.path.insert(0, str(SCRIPTS))
    from pip_index import pip_index_url

    try:
        index = args.torch_index or pip_index_url()
    except (ImportError, ValueError) as exc:
        print(
            f"images: {exc}; name an http(s) index for torch instead (CUDA_TORCH_INDEX=URL)", file=sys.stderr
        )
        return 1
    return run_all(cuda_commands(args, our_ops(), index, imagegen), args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
