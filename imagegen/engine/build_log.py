"""Read a failed build's output: the failed step, the op whose compilation failed, an excerpt.

Pure functions over the log lines, so tests feed them captured logs. Both BuildKit's
``--progress=plain`` output and the classic builder's are understood.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from imagegen.engine.log_lines import BK_ERROR, BK_HEADER, BK_OUTPUT, CLASSIC_STEP, strip_buildkit
from imagegen.engine.types import EngineKind
from imagegen.errors import BuildFailedError
from op_builder import ALL_OPS, get_builder
from op_builder.paths import PACKAGE_ROOT
from op_builder.registry import Registry

# Lines of compiler output put into a failed build's hint.
EXCERPT_LINES = 30

# A compiler / ninja / nvcc error naming a file of our ops (kernels/<family>/csrc/..., or a
# header under kernels/): group 1 is the path relative to kernels/, without its extension.
_CSRC_PATH = re.compile(r"kernels/([\w./+-]+?)\.(?:cpp|cc|cu|cuh|hip|h|hpp|c|o)\b")
# gcc/clang "file:12:3: error:", nvcc "file(12): error", ninja "FAILED:", the linker, setuptools.
_ERROR_LINE = re.compile(
    r":\d+(?::\d+)?: (?:fatal )?error\b|\(\d+\): (?:catastrophic )?error\b|^\s*FAILED: "
    r"|undefined reference|Error compiling|^\s*error: command"
)
_INCLUDED_FROM = re.compile(r"^\s*(?:In file included|from) .*kernels/")
# ninja's line naming the failed object; the next line is the command that failed.
_NINJA_FAILED = re.compile(r"^\s*FAILED: ")
# A compiler run on one source: ninja's "[3/7] c++ ... -c f.cpp", setuptools' own
# "x86_64-linux-gnu-gcc ... -c f.cpp", nvcc, hipcc.
_COMPILER_COMMAND = re.compile(
    r"^\s*(?:\[\d+/\d+\]\s+)?\S*\b(?:c\+\+|g\+\+|gcc|cc|clang\+\+|clang|nvcc|hipcc)(?:-[\d.]+)?\s.*\s-c\s"
)
# Python tracebacks (pip's and setuptools' around a failed compile): they tell where in pip
# the failure surfaced, not why, and would push the compiler's own lines out of the hint.
_TRACEBACK = re.compile(r"^(\s*)Traceback \(most recent call last\):")
_CHAINED = re.compile(
    r"^\s*(?:The above exception was the direct cause|During handling of the above exception)"
)
_OP_MARKERS = (
    re.compile(r"\bbuilding op[: ]+['\"]?([a-z][a-z0-9_]*)"),
    # setuptools' own line per extension: building 'kernels._ops.cpu_adam' extension
    re.compile(r"building '(?:[\w.]*\.)?([a-z][a-z0-9_]*)' extension"),
)
# op_builder builds ops concurrently and puts the op's name before each line of compiler and
# linker output ("[cpu_adam] c++ ..."), so interleaved lines still tell whose they are.
_OP_PREFIX = re.compile(r"^\s*\[([a-z][a-z0-9_]*)\] ?(.*)$")
# op_builder's line after each op compiled (op_builder/setup_support.py).
_OP_BUILT = re.compile(r"\bop_builder: built ([a-z][a-z0-9_]*) in (\d+(?:\.\d+)?)s\b")
# op_builder's own error line in the build stage (op_builder/setup_support.py): a garbled or
# unknown DS_BUILD_* name, an op that cannot be built for the target. It says why in one line.
_OP_BUILDER_ERROR = re.compile(r"\bop_builder: error: (.+)$")
# The rendered Dockerfile's own error line (the devel stage's torch check that ran past its
# limit): it names the step and the platform in one line, as op_builder's does.
_IMAGEGEN_ERROR = re.compile(r"\bimagegen: error: (.+)$")
# Characters of a step's title put into a message: the build stage's RUN line runs to a
# thousand characters, which buried the reason after it.
TITLE_CHARS = 100
# A full disk fails whatever step writes next (a compiler, strip, pip): not that step's fault.
_DISK_FULL = re.compile(r"No space left on device|\bENOSPC\b")
_BASE_MISSING = re.compile(
    r"pull access denied|failed to resolve source metadata|repository does not exist"
    r"|manifest unknown|failed to do request|no such host|not found: manifest",
    re.IGNORECASE,
)


def failing_step_output(lines: Sequence[str], kind: EngineKind) -> tuple[str | None, list[str]]:
    """(title of the step that failed, that step's output lines without log prefixes).

    BuildKit interleaves parallel steps (``#8 12.3 text``), so only the failed step's own
    lines are kept; a step cancelled because a sibling failed is not "the" failure. The
    classic builder runs one step at a time: its last step is the one that failed.
    When the failing step cannot be told, every line is returned.
    """
    if kind == "classic":
        title: str | None = None
        start = 0
        for i, line in enumerate(lines):
            m = CLASSIC_STEP.match(line)
            if m:
                title, start = m.group(1), i + 1
        body = [
            ln for ln in lines[start:] if not ln.startswith((" ---> ", "Removing intermediate container"))
        ]
        return title, body

    titles: dict[str, str] = {}
    failed: str | None = None
    for line in lines:
        header = BK_HEADER.match(line)
        if header:
            titles.setdefault(header.group(1), f"[{header.group(2)}] {header.group(3)}")
            continue
        err = BK_ERROR.match(line)
        if err and failed is None and "context canceled" not in err.group(2):
            failed = err.group(1)
    if failed is None:
        return None, [strip_buildkit(ln) for ln in lines]
    body = [m.group(2) for m in map(BK_OUTPUT.match, lines) if m and m.group(1) == failed]
    return titles.get(failed), body


def ops_for_source(path: str, sources_by_op: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Ops compiling ``path`` (relative to kernels/, with or without extension)."""
    stem = os.path.splitext(path)[0]
    return tuple(
        sorted(
            op
            for op, sources in sources_by_op.items()
            if any(os.path.splitext(s)[0] == stem for s in sources)
        )
    )


def split_prefix(line: str, ops: Mapping[str, object]) -> tuple[str | None, str]:
    """(op, the line without its prefix) for ``[op] text`` with a known op; (None, line) else."""
    m = _OP_PREFIX.match(line)
    if m and m.group(1) in ops:
        return m.group(1), m.group(2)
    return None, line


def op_lines(output: Sequence[str], op: str, ops: Mapping[str, object]) -> list[str]:
    """The lines ``op``'s compiler and linker printed (prefixed with its name), prefix removed."""
    return [text for owner, text in (split_prefix(line, ops) for line in output) if owner == op]


def compile_seconds(lines: Sequence[str]) -> dict[str, float]:
    """Seconds each op took to compile, from op_builder's "built OP in 41.2s" lines.

    Empty when the build stage came from the cache (or pip hid its output). An op built twice
    in one log (a retried step) keeps its last time.
    """
    seconds: dict[str, float] = {}
    for line in lines:
        m = _OP_BUILT.search(line)
        if m:
            seconds[m.group(1)] = float(m.group(2))
    return seconds


def find_failed_op(output: Sequence[str], sources_by_op: Mapping[str, Sequence[str]]) -> str | None:
    """The op whose compilation failed, judged from the failed step's output.

    In a concurrent build the first error line behind an op's prefix decides. Otherwise the
    first error line that names a source of exactly one op decides; for an error in a
    shared header, the "In file included from" lines just above it name the source. Failing
    that, the op being built when the first error appeared (setuptools' "building '...'
    extension" line, or op_builder's "building op NAME").
    """
    for line in output:
        op, text = split_prefix(line, sources_by_op)
        if op is not None and _ERROR_LINE.search(text):
            return op
    output = [split_prefix(line, sources_by_op)[1] for line in output]
    current: str | None = None
    for i, line in enumerate(output):
        for marker in _OP_MARKERS:
            m = marker.search(line)
            if m and m.group(1) in sources_by_op:
                current = m.group(1)
        if not _ERROR_LINE.search(line):
            continue
        candidates = [line]
        # Walk up the include chain (at most a screenful) to the source that pulled the header in.
        j = i - 1
        while j >= 0 and i - j <= 20 and _INCLUDED_FROM.match(output[j]):
            candidates.append(output[j])
            j -= 1
        for text in candidates:
            for path in _CSRC_PATH.findall(text):
                ops = ops_for_source(path, sources_by_op)
                if len(ops) == 1:
                    return ops[0]
        if current is not None:
            return current
    return current


def compiler_excerpt(output: Sequence[str], limit: int = EXCERPT_LINES) -> list[str]:
    """About ``limit`` lines worth reading: the compiler command that failed, then the output
    from just before the first compiler error; else the tail. Python tracebacks are left out.
    """
    lines = without_tracebacks(output)
    first = _first_compiler_error(lines)
    if first is None:
        return lines[-limit:]
    start = max(0, first - 3)
    # Include the "In file included from" chain above the error in full.
    while start > 0 and _INCLUDED_FROM.match(lines[start - 1]):
        start -= 1
    excerpt = lines[start : start + limit]
    command = failing_command(lines[:first])
    if command is not None and command not in excerpt:
        # Warnings between the command and its first error would otherwise leave it out.
        excerpt = [command, *excerpt[: limit - 1]]
    return excerpt


def _first_compiler_error(lines: Sequence[str]) -> int | None:
    for i, line in enumerate(lines):
        if _ERROR_LINE.search(line) and not _NINJA_FAILED.match(line):
            return i
    return None


def failing_command(lines: Sequence[str]) -> str | None:
    """The compiler command line that failed, from the output before its first error.

    ninja prints it right after its ``FAILED:`` line (other jobs' commands may come between);
    setuptools without ninja compiles one source at a time, so it is the last compiler run.
    """
    for i, line in enumerate(lines[:-1]):
        if _NINJA_FAILED.match(line) and lines[i + 1].strip():
            return lines[i + 1]
    return next((line for line in reversed(lines) if _COMPILER_COMMAND.match(line)), None)


def without_tracebacks(lines: Sequence[str]) -> list[str]:
    """``lines`` without Python tracebacks: the frames, the exception line that ends each one,
    and the "above exception" lines that chain them."""
    kept: list[str] = []
    depth: int | None = None  # indentation of the traceback being skipped
    for line in lines:
        m = _TRACEBACK.match(line)
        if m:
            depth = len(m.group(1))
        elif depth is not None:
            # Frames, their source lines and carets are indented deeper; the exception
            # line is the first one back at the traceback's own depth.
            if line.strip() and len(line) - len(line.lstrip()) <= depth:
                depth = None
        elif not _CHAINED.match(line):
            kept.append(line)
    return kept


def describe_failure(
    lines: Sequence[str],
    kind: EngineKind,
    sources_by_op: Mapping[str, Sequence[str]],
    tag: str,
    engine_error: str | None = None,
) -> BuildFailedError:
    """Turn a failed build's log into one message naming the op (if known) and a hint."""
    title, output = failing_step_output(lines, kind)
    op = find_failed_op(output, sources_by_op)
    # Of a concurrent build, the failed op's own lines: others' output does not cut into its error.
    own = op_lines(output, op, sources_by_op) if op is not None else []
    if not any(_ERROR_LINE.search(line) for line in own):
        own = [split_prefix(line, sources_by_op)[1] for line in output]
    excerpt = compiler_excerpt(own)
    joined = "\n".join([*lines[-40:], engine_error or ""])
    full = [line for line in [*output, *joined.splitlines()] if _DISK_FULL.search(line)]
    if full:
        return BuildFailedError(
            f"building {tag} failed: the disk ran out of space"
            + (f" at step {short_title(title)}" if title else ""),
            hint=f"{full[0]}\nthe disk where the engine keeps its data is full: `docker system df` shows "
            "what images and build cache hold there; `docker builder prune` frees the build cache, "
            "`docker image prune` unused images",
        )
    said = next((m.group(1).strip() for m in map(_said, output) if m), None)
    if op is not None:
        message = f"building {tag} failed: op {op} did not compile"
    elif said is not None:
        # op_builder said why; the step it said it in comes after, in the hint.
        parts = [f"at step {short_title(title)}"] if title else []
        if excerpt:
            parts += ["from the failed step's output:", *excerpt]
        return BuildFailedError(f"building {tag} failed: {said}", hint="\n".join(parts) or None)
    elif _BASE_MISSING.search(joined):
        return BuildFailedError(
            f"building {tag} failed: a base image is not available locally and could not be pulled",
            hint=(
                "no registry may be reachable from here: build local stand-ins with "
                "`imagegen standins` and pass --standins (or --base-devel/--base-runtime)\n"
                + "\n".join(lines[-5:])
            ),
        )
    elif title:
        message = f"building {tag} failed at step {short_title(title)}"
    else:
        message = f"building {tag} failed" + (f": {engine_error}" if engine_error else "")
    hint = "from the failed step's output:\n" + "\n".join(excerpt) if excerpt else None
    return BuildFailedError(message, hint=hint)


def _said(line: str) -> re.Match[str] | None:
    """The reason an op_builder or imagegen error line in the build gives, if ``line`` is one."""
    return _OP_BUILDER_ERROR.search(line) or _IMAGEGEN_ERROR.search(line)


def short_title(title: str, limit: int = TITLE_CHARS) -> str:
    """A step's title cut to ``limit`` characters (the stage and the command's start tell it)."""
    return title if len(title) <= limit else title[: limit - 3].rstrip() + "..."


def op_sources(registry: Registry | None = None) -> dict[str, tuple[str, ...]]:
    """Sources of every op, as a build log names them: ours relative to kernels/
    (``optim/csrc/cpu_adam.cpp``), an op package's relative to the folder above it
    (``acme_ops/csrc/acme_relu.cpp``, a suffix of its path in the build stage). Without
    ``registry``, only ours."""
    kernels = PACKAGE_ROOT / "kernels"
    found = {
        name: tuple(os.path.relpath(path, kernels) for path in get_builder(name).source_paths())
        for name in ALL_OPS
    }
    if registry is not None:
        for name, builder in registry.ops.items():
            root = registry.origins[name].root
            if name not in found and root is not None:
                found[name] = tuple(os.path.relpath(path, root.parent) for path in builder.source_paths())
    return found
