"""The CUDA 12.4 stand-ins, from Debian trixie's non-free ``nvidia-cuda-toolkit`` (12.4.131).

Debian's layout is not a CUDA home: the tools are in /usr/bin (nvcc is a wrapper whose own
g++ picks g++-13, the newest host compiler CUDA 12.4 accepts), headers in /usr/include,
libraries in /usr/lib/x86_64-linux-gnu. The devel stand-in adds what ``nvidia/cuda:12.4.1-devel``
has and torch's extension build expects:

- ``/usr/local/cuda`` made of links (``bin`` with the CUDA tools only, ``include``, ``lib64``
  and its ``stubs``, ``nvvm/libdevice``), with ``CUDA_HOME`` and nvcc on PATH;
- g++-13 as the compiler every build step finds (``/usr/local/bin`` comes first on PATH):
  the .cpp files, the link step (setuptools links with ``x86_64-linux-gnu-g++``) and nvcc agree;
- CUDA 12.4's ``crt/math_functions.h`` declares ``sinpi``/``cospi``/``sinpif``/``cospif``
  without the ``noexcept (true)`` that glibc 2.41 gives them, an error wherever the CUDA
  headers are read from a folder the compiler does not count as a system one (a CUDA home
  copied out of the image; ``include`` here links to /usr/include, which it does count): the
  four C++ declarations get it, as CUDA 12.9 did;
- Debian's driver library (``libcuda1`` 550, pulled by ``nvidia-cuda-dev``) removed: inside a
  container it would shadow the host's driver that the NVIDIA container toolkit mounts;
- of the 2.2 GB of ``*_static.a`` only ``libcudart_static.a`` kept (with ``libcudadevrt.a``
  and ``libculibos.a``, which are not ``_static``): nothing links the others statically.

The runtime stand-in (like ``nvidia/cuda:*-base``) is the suite's python3 and Debian's
``libcudart12`` with the variables the NVIDIA container toolkit reads.
"""

from __future__ import annotations

from importlib import resources

DEVEL_PACKAGES: tuple[str, ...] = (
    "python3", "python3-dev", "python3-venv", "python3-pip", "g++", "g++-13", "make", "ninja-build",
    "ca-certificates", "nvidia-cuda-toolkit", "nvidia-cuda-dev",
)  # fmt: skip
RUNTIME_PACKAGES: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates", "libcudart12")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_COMPILER = "13"  # g++-13: the newest GCC CUDA 12.4's nvcc accepts
# Linked into /usr/local/cuda/bin: the toolkit's programs, not the compilers beside them in /usr/bin.
CUDA_TOOLS: tuple[str, ...] = (
    "nvcc", "ptxas", "fatbinary", "nvlink", "cudafe++", "cuobjdump", "nvdisasm", "bin2c", "cu++filt",
    "nvprune",
)  # fmt: skip


def devel_setup() -> str:
    """The shell run in the devel container after apt (templates/standins/cuda-debian-devel.sh)."""
    return (resources.files("imagegen.building.standins") / "templates" / "cuda-debian-devel.sh").read_text()


def devel_setup_args(version: str, triplet: str) -> tuple[str, ...]:
    return (version, triplet, HOST_COMPILER, *CUDA_TOOLS)


def devel_changes(full_version: str) -> tuple[str, ...]:
    """What ``nvidia/cuda:*-devel`` sets, the stand-in's CUDA home in it."""
    return (
        "ENV CUDA_HOME=/usr/local/cuda",
        "ENV PATH=/usr/local/cuda/bin:" + SYSTEM_PATH,
        "ENV LIBRARY_PATH=/usr/local/cuda/lib64/stubs",
        f"ENV CUDA_VERSION={full_version}",
        "ENV LANG=C.UTF-8",
    )


def runtime_changes(full_version: str) -> tuple[str, ...]:
    """``nvidia/cuda:*-base``'s variables: those the NVIDIA container toolkit reads."""
    return (
        "ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:" + SYSTEM_PATH,
        "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        f"ENV CUDA_VERSION={full_version}",
        "ENV NVIDIA_VISIBLE_DEVICES=all",
        "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "ENV LANG=C.UTF-8",
    )
