"""Every environment variable op_builder (and kernels) reads: one table, and the README's from it.

Data only, a leaf module: readers refer to these names instead of string literals, and
still take the environment as a ``Mapping`` (default ``os.environ``). The names are
contracts; a variable's parsing stays with its reader (``kind`` documents it). ``PATH`` is
read only to find tools (``shutil.which``) and is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["flag", "int", "text", "list", "path", "command"]

BUILD_PREFIX = "DS_BUILD_"


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, how it is read, its default and what it does."""

    name: str
    kind: Kind
    default: str
    meaning: str
    # "op_builder" / "imagegen": ours. "torch": PyTorch's own variable, read as torch reads it.
    # "toolkit": another tool's (a compiler, Docker, pip), read as that tool reads it.
    origin: Literal["op_builder", "imagegen", "torch", "toolkit"] = "op_builder"


BUILD_OPS = Setting(
    "DS_BUILD_OPS",
    "flag",
    "`0`",
    "`1`: build every op compatible with the target; incompatible ones are listed, loudly",
)
# Not a variable itself: the pattern of one per op (``build_variable``).
BUILD_OP = Setting(
    BUILD_PREFIX + "<OP>",
    "flag",
    "unset",
    "`1`: build this op; if it cannot be built, the build fails with the reason. `0` with "
    "`DS_BUILD_OPS=1` leaves it out. An unknown name (`DS_BUILD_CPU_ADAMW`) is an error with a suggestion",
)
ACCELERATOR = Setting(
    "DS_ACCELERATOR",
    "text",
    "what torch was built for",
    "`cuda`, `rocm` or `cpu`. No GPU is needed to target `cuda`",
)
CUDA_ARCH_LIST = Setting(
    "TORCH_CUDA_ARCH_LIST",
    "list",
    "the toolkit's list",
    "`8.0;9.0+PTX`, `9.0a`, `10.0f`, `Ampere`, `native`, ... Read once, never written",
    "torch",
)
ROCM_ARCH = Setting(
    "PYTORCH_ROCM_ARCH", "list", "the toolkit's list", "gfx targets for ROCm (`gfx90a;gfx942`)", "torch"
)
SKIP_CUDA_CHECK = Setting(
    "DS_SKIP_CUDA_CHECK",
    "flag",
    "unset",
    "`1`: a toolkit / torch CUDA major-version mismatch warns instead of failing",
)
DISABLE_JIT = Setting(
    "DS_DISABLE_JIT",
    "flag",
    "unset",
    "`1`: `load()` never compiles; an op that is not installed fails with the reason "
    "(runtime images set this)",
)
CPU_NATIVE = Setting(
    "DS_CPU_NATIVE",
    "flag",
    "`0`",
    "`1`: compile CPU ops with `-march=native` (off by default: images must run on other CPUs)",
)
MAX_JOBS = Setting("MAX_JOBS", "int", "the CPUs here", "parallel compile jobs", "torch")
NVCC_THREADS = Setting(
    "DS_NVCC_THREADS", "int", "one per 8 jobs, 1 to 4", "nvcc's `--threads` (archs of one file in parallel)"
)
EXTENSIONS_DIR = Setting(
    "TORCH_EXTENSIONS_DIR",
    "path",
    "torch's cache folder",
    "where just-in-time builds go",
    "torch",
)
JIT_VERBOSE = Setting("DS_JIT_VERBOSE", "flag", "unset", "`1`: show the compiler's output during JIT builds")
OP_SOURCES = Setting(
    "DS_OP_SOURCES",
    "path",
    "none",
    "op packages (folders separated by `:`) beside ours, for every process "
    "([docs/op-packages.md](docs/op-packages.md))",
)
TARGET_PLATFORM = Setting(
    "DS_TARGET_PLATFORM",
    "text",
    "this machine's",
    "`linux/arm64` or `linux/amd64`: the platform the ops are built for. Another than this machine's "
    "cross-compiles ([docs/imagegen.md](docs/imagegen.md#arm64-grace-hopper-and-grace-blackwell)): the "
    "host code by `<triplet>-g++` (`CXX` and `CC` override it), against the target's torch",
)
TARGET_SITE_PACKAGES = Setting(
    "DS_TARGET_SITE_PACKAGES",
    "path",
    "unset",
    "a cross build's target site-packages: its torch (headers, libraries) and, for CUDA, its "
    "`nvidia-*` wheels, installed for the target platform and never run here",
)
STABLE_HEADERS = Setting(
    "DS_STABLE_HEADERS",
    "path",
    "the installed torch's",
    "a torch `include` folder (2.10 or newer) the stable ops compile against instead of the installed "
    "torch's: with the same folder every torch release >= 2.10 builds the same module, byte for byte "
    "(images pin the newest torch of their target: [docs/op-packages.md](docs/op-packages.md))",
)
DEBUG = Setting("OP_BUILDER_DEBUG", "flag", "unset", "`1`: show a traceback with errors")
CXX = Setting("CXX", "command", "`c++` (a cross build: `<triplet>-g++`)", "the host C++ compiler", "toolkit")
CC = Setting(
    "CC",
    "command",
    "unset (a cross build: `<triplet>-gcc`)",
    "the C compiler; torch's builder hands it to nvcc as `-ccbin`",
    "toolkit",
)
CUDA_HOME = Setting(
    "CUDA_HOME",
    "path",
    "`CUDA_PATH`, else nvcc's folder, else `/usr/local/cuda`",
    "the CUDA toolkit",
    "toolkit",
)
CUDA_PATH = Setting("CUDA_PATH", "path", "unset", "the CUDA toolkit when `CUDA_HOME` is unset", "toolkit")
ROCM_HOME = Setting(
    "ROCM_HOME", "path", "`ROCM_PATH`, else `/opt/rocm`, else hipcc's folder", "the ROCm toolkit", "toolkit"
)
ROCM_PATH = Setting("ROCM_PATH", "path", "unset", "the ROCm toolkit when `ROCM_HOME` is unset", "toolkit")
VISIBLE_DEVICES = Setting(
    "CUDA_VISIBLE_DEVICES",
    "list",
    "every GPU",
    "the GPUs CUDA shows (indices or `GPU-` UUIDs); the preflight at load reads them through NVML "
    "as torch models CUDA's parser (a repeat shows none), and asks CUDA itself where that is "
    "uncertain (MIG, an entry torch's parser refuses)",
    "toolkit",
)
DEVICE_ORDER = Setting(
    "CUDA_DEVICE_ORDER",
    "text",
    "`FASTEST_FIRST`",
    "`PCI_BUS_ID` numbers GPUs by PCI bus id (NVML's devices are sorted so); otherwise an index "
    "maps to a GPU only where every GPU is alike",
    "toolkit",
)
NVML_CUDA_CHECK = Setting(
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "flag",
    "unset",
    "torch's NVML-based `is_available()`; set to `1` while a JIT build imports torch's extension module "
    "(which asks it), unless you set it yourself, so the build leaves CUDA uninitialised",
    "torch",
)

SETTINGS: tuple[Setting, ...] = (
    BUILD_OPS,
    BUILD_OP,
    ACCELERATOR,
    CUDA_ARCH_LIST,
    ROCM_ARCH,
    SKIP_CUDA_CHECK,
    DISABLE_JIT,
    CPU_NATIVE,
    MAX_JOBS,
    NVCC_THREADS,
    EXTENSIONS_DIR,
    JIT_VERBOSE,
    OP_SOURCES,
    TARGET_PLATFORM,
    TARGET_SITE_PACKAGES,
    STABLE_HEADERS,
    DEBUG,
    CXX,
    CC,
    CUDA_HOME,
    CUDA_PATH,
    ROCM_HOME,
    ROCM_PATH,
    VISIBLE_DEVICES,
    DEVICE_ORDER,
    NVML_CUDA_CHECK,
)

# DS_BUILD_* names that are settings, not ops: never "unknown build variable".
BUILD_SETTINGS = frozenset(s.name for s in SETTINGS if s.name.startswith(BUILD_PREFIX) and s is not BUILD_OP)


def build_variable(op: str) -> str:
    """``DS_BUILD_<OP>`` for an op name: the switch that builds it in."""
    return f"{BUILD_PREFIX}{op.upper()}"


def by_name(name: str) -> Setting:
    """The setting called ``name``; KeyError names the known ones."""
    for setting in SETTINGS:
        if setting.name == name:
            return setting
    raise KeyError(f"{name} is not a setting; known: {', '.join(s.name for s in SETTINGS)}")


def markdown_table(settings: tuple[Setting, ...] = SETTINGS) -> str:
    """The README's table of variables: one row per setting, in the table's order."""
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for s in settings:
        meaning = s.meaning + (" (PyTorch's variable)" if s.origin == "torch" else "")
        rows.append(f"| `{s.name}` | {s.kind} | {s.default} | {meaning} |")
    return "\n".join(rows) + "\n"


def table_under(text: str, heading: str) -> str:
    """The first Markdown table after the line ``heading`` in ``text`` ('' when there is none)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1 if heading + "\n" in lines else len(lines)
    while start < len(lines) and not lines[start].startswith("|"):
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[start:end])


def with_table(text: str, heading: str, table: str) -> str:
    """``text`` with the table under ``heading`` replaced by ``table`` (how the docs are regenerated)."""
    old = table_under(text, heading)
    if not old:
        raise ValueError(f"no table under {heading!r}")
    before, _, after = text.partition(heading + "\n")
    return before + heading + "\n" + after.replace(old, table, 1)
