"""What ``setup.py`` needs: the planned extensions and a build_ext that writes the manifest.

The build_ext compiles the ops at once within one job budget (MAX_JOBS, else the CPUs; the
split is ``parallel_build.split_jobs``), prints every compiler and linker line behind its op's
name and each op's time ("op_builder: built cpu_adam in 41.2s", which imagegen's build report
reads), and writes the manifest once every op is built.

Kept apart from ``setup.py`` so the logic is importable and testable. Nothing
here imports torch unless at least one op is selected, so a plain
``pip wheel .`` (no DS_BUILD_* set) needs no torch and yields a pure wheel whose
ops compile just in time.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from op_builder import manifest, stable_abi
from op_builder.cross import native_platform
from op_builder.errors import BadInputError
from op_builder.parallel_build import (
    JobSplit,
    PrefixedOutput,
    job_budget,
    op_cost,
    run_prefixed,
    split_jobs,
)
from op_builder.paths import MANIFEST_RELPATH
from op_builder.plan import Plan, plan_from_environment, requested_ops
from op_builder.registry import ALL_OPS

# Ops build on threads of their own (setuptools' pool), and the build log is read line by line
# (imagegen's build report finds "built OP in" lines): a line goes out in one write, under a lock.
# print() writes the text and its newline apart, so two threads' lines could merge into one.
_SAY_LOCK = threading.Lock()


def _say(message: str) -> None:
    with _SAY_LOCK:
        sys.stderr.write(f"op_builder: {message}\n")
        sys.stderr.flush()


def say_error(message: str, hint: str | None) -> None:
    """The one line setup.py prints for an error, in the build log's voice."""
    _say(f"error: {message}" + (f" (hint: {hint})" if hint else ""))


def _plan_error(plan: Plan) -> BadInputError:
    """One error for all of the plan's: each is something the environment asked for."""
    messages = "; ".join(e.message for e in plan.errors) or "no build context"
    hints = "; ".join(e.hint for e in plan.errors if e.hint)
    return BadInputError(messages, hint=hints or None)


def _print_plan(plan: Plan) -> None:
    cross = plan.context.toolchain.cross if plan.context is not None else None
    if cross is not None:
        _say(cross.describe())
    for warning in plan.warnings:
        _say(f"warning: {warning}")
    cpu = f"{cross.platform} CPU" if cross is not None else "host CPU"
    for op in plan.ops:
        archs = ";".join(op.archs) if op.archs else cpu
        _say(f"will build {op.name} ({archs})")
    if plan.skipped:
        # Loud on purpose: DS_BUILD_OPS=1 skipping ops silently is how images ship without them.
        _say(f"SKIPPED {len(plan.skipped)} op(s) that cannot be built for {plan.accelerator}:")
        for skipped in plan.skipped:
            _say(f"  - {skipped.name}: {skipped.reason}")


# setup.py commands that only write metadata: pip runs setup.py three times for one wheel
# (egg_info for the build requirements, dist_info for the metadata, bdist_wheel), and only the
# last compiles. Planning imports torch and probes the compiler: seconds each time, which a
# rebuild after a one-line change notices.
_METADATA_COMMANDS = frozenset({"egg_info", "dist_info"})
_COMPILING_COMMANDS = frozenset(
    {"build", "build_ext", "bdist_wheel", "bdist", "install", "develop", "editable_wheel", "bdist_egg"}
)


def needs_extensions(argv: Sequence[str]) -> bool:
    """False when setup.py runs only metadata commands (``argv`` as setup.py got it)."""
    words = set(argv[1:])
    return not (words & _METADATA_COMMANDS) or bool(words & _COMPILING_COMMANDS)


def planned_extensions(env: Mapping[str, str]) -> tuple[list[Any], dict[str, Any]]:
    """(ext_modules, cmdclass) for setup().

    Raises ``BadInputError`` (exit 2) for a garbled or unknown ``DS_BUILD_*`` name, a plan with
    errors (an op asked for that cannot be built here) and a garbled ``MAX_JOBS``: setup.py,
    the entry point, turns it into the message and the exit.
    """
    build_all, explicit = requested_ops(env)
    if not build_all and not any(explicit.values()):
        return [], {}
    plan = plan_from_environment(env)
    _print_plan(plan)
    if not plan.ok or plan.context is None:
        raise _plan_error(plan)
    if not plan.ops:
        _say("no op selected can be built; the wheel will compile ops just in time")
        return [], {}
    budget = job_budget(env)
    split = split_jobs(
        budget,
        {op.name: len(op.flags.sources) for op in plan.ops},
        {op.name: op_cost(op.flags.sources, op.flags.include_dirs, len(op.archs)) for op in plan.ops},
    )
    ctx = plan.context
    if ctx.toolchain.cross is not None:
        # setuptools reads the compilers, the linker and the wheel's platform from the
        # environment when the build starts; this process is the build.
        os.environ.update(ctx.toolchain.cross.compiler_environment())
    by_name = {op.name: op for op in plan.ops}
    extensions = [ALL_OPS[name].extension(ctx) for name in split.order if name in by_name]
    return extensions, {"build_ext": _manifest_build_ext(plan, split)}


@dataclass(frozen=True)
class _OpJob:
    """The op a build thread is compiling, and its share of the budget."""

    name: str
    jobs: int


def _op_name(ext: Any) -> str:
    return str(ext.name).rsplit(".", 1)[-1]


@contextmanager
def _replaced(owner: Any, attribute: str, replacement: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``owner.attribute`` is ``replacement`` inside the block; yields the original."""
    original = getattr(owner, attribute)
    setattr(owner, attribute, replacement)
    try:
        yield original
    finally:
        setattr(owner, attribute, original)


def _manifest_build_ext(plan: Plan, split: JobSplit) -> type:
    # Deferred: a wheel with no op selected is built without torch.
    from setuptools.errors import ExecError
    from torch.utils import cpp_extension

    class ManifestBuildExt(cpp_extension.BuildExtension):
        """torch's BuildExtension, building the ops concurrently within one job budget,
        announcing and timing each op, and recording what was built in the manifest.

        Concurrency comes from setuptools' own ``parallel`` option (a thread pool over
        ``build_extension``; torch's class inherits it untouched). Three things make
        torch's ninja path safe and readable under it: each op compiles in its own
        directory (one build.ninja and .ninja_log per op, not one shared by all), each op's
        ninja runs with the op's ``-j`` (torch's would give every op the whole MAX_JOBS),
        and every line of compiler and linker output carries the op's name.
        """

        def finalize_options(self) -> None:
            super().finalize_options()
            why_serial = self._why_serial()
            if why_serial is not None:
                # torch's own way: one op after another, each op's ninja given the whole budget.
                self._split = JobSplit(split.budget, 1, dict.fromkeys(split.order, split.budget), split.order)
                _say(f"building ops one at a time: {why_serial}")
            else:
                self._split = split
            # setuptools' pool: None builds in this thread, N in a pool of N threads.
            self.parallel = self._split.workers if self._split.workers > 1 else None

        def _why_serial(self) -> str | None:
            if not self.use_ninja:
                # torch's compile without ninja swaps the shared compiler's executable per source.
                return "ninja is not installed"
            if os.name != "posix" or not hasattr(cpp_extension, "_run_ninja_build"):
                # Each op's own -j and prefixed output replace torch's (private) ninja runner.
                return "this torch's extension builder runs ninja in a way op_builder does not know"
            return None

        def build_extensions(self) -> None:
            if len(self._split.order) > 1:
                _say(
                    f"{split.budget} compile job(s) (MAX_JOBS, else the CPUs): "
                    f"{self._split.workers} op(s) at once, "
                    + ", ".join(f"{op} -j{n}" for op, n in self._split.jobs.items())
                )
            self._output = PrefixedOutput()
            self._local = threading.local()
            self._hook_lock = threading.Lock()
            self._hooked = False
            self._failed: list[str] = []
            if not hasattr(cpp_extension, "_run_ninja_build"):  # serial, torch's own ninja runs
                super().build_extensions()
                return
            with _replaced(cpp_extension, "_run_ninja_build", self._run_ninja) as original:
                self._torch_run_ninja = original
                super().build_extensions()

        def _job(self) -> _OpJob | None:
            job: _OpJob | None = getattr(self._local, "job", None)
            return job

        def build_extension(self, ext: Any) -> None:
            name = _op_name(ext)
            if self._failed:
                # The build fails anyway: do not start more compiles after the first failure.
                _say(f"skipping {name}: op {self._failed[0]} failed")
                return
            self._hook_compiler()
            jobs = self._split.jobs.get(name, 1)
            _say(f"building op {name} ({jobs} job{'s' if jobs > 1 else ''})")
            self._local.job = _OpJob(name, jobs)
            start = time.monotonic()
            try:
                super().build_extension(ext)
            except BaseException:
                self._failed.append(name)
                _say(f"op {name} FAILED to build")
                raise
            finally:
                self._local.job = None
            seconds = time.monotonic() - start
            # imagegen.engine.build_log reads this line for the build report's compile_seconds.
            _say(f"built {name} in {seconds:.1f}s")

        def _hook_compiler(self) -> None:
            """Per-op object directories and prefixed link output, on the compiler all threads share.

            Installed at the first op, not earlier: torch's build_extensions sets the
            compiler's ``compile`` (its ninja path) only after this class's code has run.
            """
            with self._hook_lock:
                if self._hooked:
                    return
                compiler = self.compiler
                compile_objects = compiler.compile

                def per_op_compile(sources: Any, output_dir: str | None = None, *args: Any, **kw: Any) -> Any:
                    job = self._job()
                    if job is not None and output_dir is not None:
                        output_dir = os.path.join(output_dir, job.name)
                    return compile_objects(sources, output_dir, *args, **kw)

                compiler.compile = per_op_compile
                # The linker runs through the compiler's ``call`` (setuptools >= 75), or its
                # ``spawn`` (older; it raises its own error type).
                name = "call" if hasattr(compiler, "call") else "spawn"
                setattr(compiler, name, self._prefixed_runner(getattr(compiler, name), name == "call"))
                self._hooked = True

        def _prefixed_runner(self, run: Callable[..., None], raises_called: bool) -> Callable[..., None]:
            def prefixed(cmd: list[str], **kw: Any) -> None:
                job = self._job()
                if job is None:
                    run(cmd, **kw)
                    return
                self._output.lines(job.name, [shlex.join(str(c) for c in cmd)])
                code = run_prefixed(cmd, prefix=job.name, output=self._output, env=kw.get("env"))
                if code != 0 and raises_called:
                    raise subprocess.CalledProcessError(code, cmd)
                if code != 0:
                    raise ExecError(f"command {cmd[0]!r} failed with exit code {code}")

            return prefixed

        def _run_ninja(self, build_directory: str, verbose: bool, error_prefix: str) -> None:
            """torch's ``_run_ninja_build`` for one op: its own ``-j``, its output prefixed."""
            job = self._job()
            if job is None:  # not one of our builds (nothing else calls it, but stay correct)
                self._torch_run_ninja(build_directory, verbose, error_prefix)
                return
            command = ["ninja", "-v", "-j", str(job.jobs)]
            code = run_prefixed(command, prefix=job.name, output=self._output, cwd=build_directory)
            if code != 0:
                # torch's message, which imagegen's build-log reader knows, with the op's name.
                raise RuntimeError(f"{error_prefix} {job.name}: ninja exited {code}")

        def _check_stable_modules(self) -> None:
            """A stable build that takes anything from torch or Python beyond its target's ABI
            fails here, naming the symbols, rather than on some user's other torch."""
            for op in plan.ops:
                target = op.flags.stable_abi
                if target is None:
                    continue
                report = stable_abi.check_module(self.get_ext_fullpath(op.flags.module), target)
                if not report.ok:
                    why = report.describe()
                    raise RuntimeError(f"op_builder: {op.name} breaks the stable ABI of {target}: {why}")
                _say(f"{op.name}: stable ABI, loads on torch >= {target}")

        def get_ext_filename(self, fullname: str) -> str:
            name: str = super().get_ext_filename(fullname)  # type: ignore[no-untyped-call]
            cross = plan.context.toolchain.cross if plan.context is not None else None
            if cross is None:
                return name
            native = str(sysconfig.get_config_var("EXT_SUFFIX"))
            return name[: -len(native)] + cross.ext_suffix(native) if name.endswith(native) else name

        def run(self) -> None:
            super().run()
            missing = [e.name for e in self.extensions if not Path(self.get_ext_fullpath(e.name)).is_file()]
            if missing:  # never a manifest naming an op the wheel lacks
                raise RuntimeError("op_builder: not built: " + ", ".join(missing))
            self._check_stable_modules()
            import torch  # deferred like BuildExtension above

            ctx = plan.context
            assert ctx is not None
            toolkit = ctx.toolchain.cuda.version if ctx.accelerator == "cuda" and ctx.toolchain.cuda else None
            hip = ctx.toolchain.rocm.version if ctx.accelerator == "rocm" and ctx.toolchain.rocm else None
            cross = ctx.toolchain.cross
            built = manifest.Manifest(
                # A cross build's ops are for the target's torch, which this process cannot import.
                torch=cross.torch.version if cross is not None else torch.__version__,
                cuda=toolkit,
                hip=hip,
                accelerator=ctx.accelerator,
                python=platform.python_version(),
                platform=cross.platform if cross is not None else native_platform(),
                ops={
                    op.name: manifest.InstalledOp(
                        op.name, op.flags.module, op.target, op.archs, op.flags.to_json(), op.flags.stable_abi
                    )
                    for op in plan.ops
                },
            )
            target = Path(self.build_lib) / MANIFEST_RELPATH
            manifest.write(built, target)
            if self.inplace:
                manifest.write(built, manifest.manifest_path())
            _say(f"wrote {target} ({len(plan.ops)} op(s))")

    return ManifestBuildExt
