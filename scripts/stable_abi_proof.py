"""One stable CPU module, built once, loads and computes right on two torch releases.

    python scripts/stable_abi_proof.py [--torch VERSION] [--headers VERSION] [--revision REV] [--work DIR]
                                       [--venvs DIR] [--out FILE] [--test FILE ...]
                                       [--install-timeout SECONDS]

Run with the project's venv (``make stable-abi-proof``). Steps:

1. build: cpu_adam, cpu_adagrad and cpu_lion ahead of time into one wheel, with this Python's torch
   (the build torch) against the headers of torch ``--headers`` (default: the catalog's newest CPU
   torch, as images pin them: ``DS_STABLE_HEADERS``, read out of its wheel on pip's index), from
   a copy of the build inputs (``imagegen.building.build_inputs``) of the
   working tree (the report names its uncommitted edits) or of ``--revision`` (``git archive``);
   the tests below come from the same tree;
2. two venvs under ``--venvs``, kept between runs and reused while their torch still matches: one
   with the build's torch, one with ``--torch`` (default 2.10.0, the stable target itself; from
   the indexes pip is configured with: PyPI's CUDA build and its nvidia-* wheels, ~3 GB), each
   with packaging, numpy and pytest;
3. in each venv the one wheel, ``--no-deps``; then, from a folder outside the checkout, with
   ``DS_DISABLE_JIT=1`` and an empty ``TORCH_EXTENSIONS_DIR`` (which must stay empty):
   ``python -m op_builder verify`` of the three ops (loaded from aot, self-test pass); a probe
   that loads each op and prints its module's file, sha256 and ``stable_abi.check_module(file,
   "2.10")``; and the kernel tests that compare the ops against torch, copied alone out of the
   checkout (a pytest plugin records which module file each op had when the tests ran);
4. across the two: every module is the same bytes in both venvs and in the wheel, and the two
   torch releases differ;
5. the same wheel built again with the other venv's torch against the same headers: every module
   the same bytes as the first build's (an image of either torch gets the same modules).

Prints a summary and writes the report (JSON) to ``--out`` (default
``bench/results/stable_abi_proof.json``).

Exit status: 0 proven; 1 a check failed (or the wheel did not build); 2 bad arguments; 3 a venv
could not be set up (a torch the index does not serve, or an install past --install-timeout).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from xml.etree import ElementTree

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout

from op_builder import stable_abi  # noqa: E402

OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion")
TARGET = "2.10"  # what the three builders declare (kernels/optim/builders.py) and the check holds
DEFAULT_TORCH = "2.10.0"
# The kernel tests that compare the three ops against torch (Adam/AdamW/Adagrad, Lion written
# out) on every instruction set, in fp32, half precision and odd layouts: ~50 s per venv here.
DEFAULT_TESTS = (
    "tests/kernels/test_cpu_optim.py",
    "tests/kernels/test_cpu_optim_half.py",
    "tests/kernels/test_cpu_optim_layouts.py",
)
RESULTS = REPO / "bench" / "results" / "stable_abi_proof.json"
# pytest-timeout: the project's pytest configuration sets a timeout.
# And what the other torch's build of the wheel runs (setup.py, torch's extension builder).
TEST_PACKAGES = ("packaging", "numpy", "pytest", "pytest-timeout", "setuptools>=69", "wheel", "ninja")
ENV_LABELS = ("build-torch", "other-torch")
OTHER_BUILD = "other-build"
WORK_FOLDERS = ("tree", "src", "wheel", "logs", OTHER_BUILD, *ENV_LABELS)
HEARTBEAT_SECONDS = 30.0

# Run in each venv: what the loader gives each op there, and the symbol check of that very file.
PROBE = """
import hashlib, json, sys
import torch, kernels, op_builder
from op_builder import get_builder, stable_abi
from op_builder.manifest import read_installed

target, names = sys.argv[1], sys.argv[2:]
manifest = read_installed()
ops = {}
for name in names:
    module = get_builder(name).load()
    path = module.__file__
    report = stable_abi.check_module(path, target)
    print(f"{name}: module.__file__ = {path}", file=sys.stderr)
    ops[name] = {
        "file": path,
        "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "manifest_stable_abi": manifest.ops[name].stable_abi if manifest and name in manifest.ops else None,
        "namespace": getattr(module, "op_namespace", None),
        "check_ok": report.ok,
        "check": report.describe(),
    }
print(json.dumps({
    "python": sys.executable,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "op_builder": op_builder.__file__,
    "kernels": kernels.__file__,
    "manifest_torch": manifest.torch if manifest else None,
    "ops": ops,
}))
"""

# A pytest plugin beside the copied tests: once they ran, the module file each op had (the
# loader caches one module per op and process, so this is the one the tests called).
PLUGIN_NAME = "_stable_abi_proof_plugin"
PLUGIN = """
import json, os

def pytest_sessionfinish(session, exitstatus):
    from op_builder import get_builder

    names = os.environ["STABLE_ABI_PROOF_OPS"].split(",")
    files = {name: get_builder(name).load().__file__ for name in names}
    for name, path in files.items():
        print(f"\\n{name}: module.__file__ = {path}", end="")
    print()
    with open(os.environ["STABLE_ABI_PROOF_LOADED"], "w") as out:
        json.dump(files, out)
"""


class ProofError(Exception):
    """A step that could not go on; its exit code says which kind (see the module doc)."""

    exit_code = 1


class SetupError(ProofError):
    exit_code = 3


class BadInput(ProofError):
    exit_code = 2


@dataclass(frozen=True)
class Options:
    torch: str  # the second torch's version, "2.10.0" or "2.10" (the newest 2.10.*)
    work: Path  # the wheel, the copied sources and tests, the logs: made afresh each run
    venvs: Path  # the venvs, kept between runs
    out: Path
    tests: tuple[str, ...] = DEFAULT_TESTS
    install_timeout: float = 25 * 60
    revision: str | None = None  # a git revision to build and test; None: the working tree
    headers: str | None = None  # the torch release whose headers the builds compile against


@dataclass(frozen=True)
class EnvResult:
    """One venv's run: what it is, what each check gave, and why it failed (empty: passed)."""

    label: str
    venv: str
    torch: str
    cuda: str | None
    verify: list[dict[str, Any]]
    modules: dict[str, dict[str, Any]]  # per op: file, sha256, check_ok, check, ...
    tests: dict[str, Any]  # passed, failed, errors, skipped, loaded (op -> module file)
    seconds: dict[str, float]
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class ProofReport:
    ok: bool
    date: str
    machine: dict[str, Any]
    target: str
    build_torch: str
    source: dict[str, Any]  # revision (None: the working tree), commit, modified files
    wheel: str
    wheel_modules: dict[str, dict[str, Any]]  # per op: member, sha256, stable_abi (manifest)
    envs: tuple[EnvResult, ...]
    failures: tuple[str, ...]  # across the venvs (each venv's own are in its entry)
    headers: str = ""  # the torch release whose headers both builds compiled against
    # The wheel built again with the other venv's torch: per op, member, sha256, stable_abi.
    other_build: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "envs": [{**asdict(e), "ok": e.ok} for e in self.envs]}


# ------------------------------------------------------------------ steps and processes


def log(message: str) -> None:
    print(message, flush=True)


class Steps:
    """Step headers and their elapsed times, printed and kept for the report."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], T]) -> T:
        log(f"==> {name}")
        start = time.perf_counter()
        try:
            return fn()
        finally:
            took = time.perf_counter() - start
            self.seconds[name] = round(took, 1)
            log(f"    {name}: {took:.1f}s")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would point a child at the checkout or change a build."""
    drop = ("DS_", "PYTHONPATH", "VIRTUAL_ENV", "TORCH_EXTENSIONS_DIR", "STABLE_ABI_PROOF_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, **extra}


def run_logged(
    command: Sequence[str],
    log_file: Path,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    show: Callable[[str], bool] = lambda line: False,
    timeout: float | None = None,
) -> int:
    """Run ``command`` with its output in ``log_file``; print the lines ``show`` picks as they come
    and, when nothing was printed for a while, a line saying it still runs. Returns the exit code;
    past ``timeout`` the command is killed and SetupError raised."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    lines: queue.Queue[str | None] = queue.Queue()
    with open(log_file, "w") as out:
        # Unbuffered: a Python child (pip) writing to a pipe holds its lines back in blocks.
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        stream = process.stdout

        def read() -> None:
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        last = time.perf_counter()
        while True:
            try:
                line = lines.get(timeout=5)
            except queue.Empty:
                line = ""
            if line is None:
                break
            now = time.perf_counter()
            if line:
                out.write(line)
                if show(line):
                    log(f"    [{now - start:5.0f}s] {line.rstrip()}")
                    last = now
            if timeout is not None and now - start > timeout:
                process.kill()
                process.wait()
                raise SetupError(
                    f"{' '.join(command[:4])} ... ran past {timeout:.0f}s and was stopped (log: {log_file})"
                )
            if now - last > HEARTBEAT_SECONDS:
                log(f"    [{now - start:5.0f}s] still running (log: {log_file})")
                last = now
        return process.wait()


def tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ 1. the wheel


@dataclass(frozen=True)
class Source:
    """What is built and tested: the working tree (with its uncommitted edits, named) or a revision."""

    root: Path
    revision: str | None  # None: the working tree
    commit: str
    modified: tuple[str, ...]  # build inputs and tests that differ from the commit (working tree)


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BadInput(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def source_tree(revision: str | None, dest: Path) -> Source:
    """The working tree, or ``revision`` extracted into ``dest`` (``git archive``): a proof of a
    commit, whatever is being edited in the checkout meanwhile."""
    from imagegen.building.build_inputs import SOURCE_DIRS, SOURCE_FILES

    if revision is None:
        inputs = [*SOURCE_FILES, *SOURCE_DIRS, "tests"]
        status = git("status", "--porcelain", "--", *inputs).splitlines()
        return Source(REPO, None, git("rev-parse", "HEAD").strip(), tuple(line[3:] for line in status))
    commit = git("rev-parse", "--verify", f"{revision}^{{commit}}").strip()
    dest.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit], stdout=subprocess.PIPE
    )
    extracted = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout)
    if archive.wait() != 0 or extracted.returncode != 0:
        raise ProofError(f"git archive {commit} could not be extracted into {dest}")
    return Source(dest, revision, commit, ())


def build_wheel(
    work: Path,
    root: Path,
    ops: tuple[str, ...] = OPS,
    python: str = sys.executable,
    headers: Path | None = None,
) -> Path:
    """``ops`` (the three) ahead of time in one wheel, built with ``python``'s torch (this one's by
    default) from a copy of the build inputs of ``root`` (a checkout's own build/ holds whatever was
    built there last); with ``headers``, against that torch include folder (DS_STABLE_HEADERS)."""
    # Deferred: imagegen is the checkout's (this script runs with the project's venv).
    from imagegen.building.build_inputs import copy_build_inputs

    source = copy_build_inputs(root, work / "src")
    wheels = work / "wheel"
    # The CPU ops for the CPU, whatever build of torch: a CUDA one would have the build check its
    # CUDA against the toolkit here, which the CPU ops never use.
    build = {f"DS_BUILD_{op.upper()}": "1" for op in ops} | {"DS_ACCELERATOR": "cpu"}
    if headers is not None:
        build["DS_STABLE_HEADERS"] = str(headers)
    # That Python's venv first on PATH: torch's extension builder runs its ninja.
    build["PATH"] = os.pathsep.join([str(Path(python).parent), os.environ["PATH"]])
    command = [
        python,
        "-m",
        "pip",
        "wheel",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        str(wheels),
        ".",
    ]
    code = run_logged(
        command,
        work / "logs" / "wheel.log",
        env=clean_env(DS_BUILD_OPS="0", **build),
        cwd=source,
        show=lambda line: line.startswith(("op_builder:", "Successfully built")) or "building op" in line,
    )
    found = sorted(wheels.glob("*.whl"))
    if code != 0 or len(found) != 1:
        raise ProofError(f"the wheel did not build (exit {code}):\n{tail(work / 'logs' / 'wheel.log')}")
    return found[0]


def wheel_modules(wheel: Path) -> dict[str, dict[str, Any]]:
    """Each op's module in the wheel: its member name, sha256 and the manifest's stable target."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        manifest = json.loads(archive.read("kernels/_ops/manifest.json"))
        found: dict[str, dict[str, Any]] = {}
        for op in OPS:
            members = [n for n in names if n.startswith(f"kernels/_ops/{op}.") and n.endswith(".so")]
            entry = manifest.get("ops", {}).get(op, {})
            found[op] = {
                "member": members[0] if len(members) == 1 else members,
                "sha256": sha256(archive.read(members[0])) if len(members) == 1 else None,
                "stable_abi": entry.get("stable_abi"),
            }
    return found


def judge_wheel(modules: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The wheel holds one stable ``.abi3.so`` per op, each marked with the target."""
    failures = []
    for op, entry in modules.items():
        member = entry["member"]
        if not isinstance(member, str):
            failures.append(f"the wheel holds {len(member)} modules of {op}, not one: {member}")
        elif not member.endswith(".abi3.so"):
            failures.append(f"the wheel's {op} module {member} is not a limited-API (.abi3.so) module")
        if entry["stable_abi"] != TARGET:
            failures.append(
                f"the wheel's manifest gives {op} stable_abi {entry['stable_abi']!r}, not {TARGET!r}"
            )
    return failures


# ------------------------------------------------------------------ 2. the venvs


def torch_requirement(version: str) -> str:
    """pip's requirement for a torch version: "2.10.0" exactly, "2.10" the newest 2.10.*."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?(\+[\w.]+)?", version):
        raise BadInput(f"--torch takes a torch version like 2.10.0 or 2.10; got {version!r}")
    return f"torch=={version}" if version.count(".") >= 2 else f"torch=={version}.*"


def venv_torch(python: Path) -> str | None:
    """The torch version of a venv that also has the test packages; None when it lacks one."""
    if not python.exists():
        return None
    modules = ", ".join(re.split(r"[<>=!~ ]", p)[0].replace("-", "_") for p in TEST_PACKAGES)
    probe = f"import {modules}, torch; print(torch.__version__)"
    done = subprocess.run([str(python), "-c", probe], env=clean_env(), capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def satisfies(version: str, requirement: str) -> bool:
    from packaging.requirements import Requirement

    return Requirement(requirement).specifier.contains(version, prereleases=True)


def ensure_venv(venv: Path, requirement: str, timeout: float, logs: Path) -> Path:
    """A venv with ``requirement`` and the test packages: the one at ``venv`` when it has them
    (a rerun does not fetch torch again), else made or brought up to it with pip."""
    python = venv / "bin" / "python"
    have = venv_torch(python)
    if have is not None and satisfies(have, requirement):
        log(f"    reusing {venv} (torch {have})")
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log(f"    installing {requirement} {' '.join(TEST_PACKAGES)} into {venv} (pip's configured indexes)")
    pip_log = logs / f"install-{venv.name}.log"
    command = [str(python), "-m", "pip", "install", "--progress-bar", "off", requirement, *TEST_PACKAGES]
    code = run_logged(
        command,
        pip_log,
        env=clean_env(),
        # pip's own progress: which wheel it fetches and how large; the ignored-location warnings
        # of the local file indexes are left in the log.
        show=lambda line: line.startswith(("Collecting torch", "Downloading", "Installing", "Successfully")),
        timeout=timeout,
    )
    if code != 0:
        raise SetupError(f"pip could not install {requirement} into {venv} (exit {code}):\n{tail(pip_log)}")
    have = venv_torch(python)
    if have is None or not satisfies(have, requirement):
        raise SetupError(f"{venv} has torch {have} after installing {requirement}")
    return python


def install_wheel(python: Path, wheel: Path, log_file: Path) -> None:
    # --force-reinstall: every proof's wheel is version 0.1.0, and this one must replace the last.
    command = [str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", str(wheel)]
    code = run_logged(command, log_file, env=clean_env())
    if code != 0:
        raise ProofError(f"the wheel did not install with {python} (exit {code}):\n{tail(log_file)}")


# ------------------------------------------------------------------ 3. the checks in one venv


def copy_tests(tests: Sequence[str], dest: Path, root: Path = REPO) -> list[str]:
    """The named test files of ``root`` and what they need (the conftests and ``_*.py`` helpers on
    their way from tests/, with its __init__.py), and a pytest configuration: nothing else."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted: set[Path] = {Path("tests/__init__.py")}
    for test in tests:
        path = Path(test)
        if not (root / path).is_file() or path.parts[0] != "tests":
            raise BadInput(f"--test {test}: not a test file of this checkout's tests/")
        wanted.add(path)
        for folder in path.parents:
            if folder == Path("."):
                break
            wanted.update(p.relative_to(root) for p in (root / folder).glob("conftest.py"))
            wanted.update(p.relative_to(root) for p in (root / folder).glob("_*.py"))
            if (root / folder / "__init__.py").exists():
                wanted.add(folder / "__init__.py")
    for path in sorted(wanted):
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, dest / path)
    # The project's pytest configuration as it is (markers, --strict-markers, the timeout; its
    # pythonpath "." is then the folder of these copies).
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
    (dest / f"{PLUGIN_NAME}.py").write_text(PLUGIN)
    return [str(Path(t)) for t in tests]


def judge_verify(returncode: int, report: Mapping[str, Any] | None) -> list[str]:
    """``verify`` passed: exit 0, every op loaded ahead of time with its self-test passing."""
    if report is None:
        return [f"verify gave no JSON report (exit {returncode})"]
    failures = [] if returncode == 0 else [f"verify exited {returncode}"]
    by_name = {op.get("name"): op for op in report.get("ops", [])}
    for name in OPS:
        op = by_name.get(name)
        if op is None:
            failures.append(f"verify did not report {name}")
            continue
        test = op.get("selftest") or {}
        if op.get("source") != "aot":
            failures.append(f"verify loaded {name} from {op.get('source')}, not aot: {op.get('error')}")
        elif not op.get("ok") or not test.get("ok") or test.get("skipped"):
            failures.append(f"verify: {name} failed: {op.get('error') or test}")
    return failures


def judge_modules(probe: Mapping[str, Any] | None, site: Path) -> list[str]:
    """Each op's module is the installed ``.abi3.so`` of the wheel (not the checkout, not a JIT
    build), marked with the target in the manifest, and it passes the symbol check."""
    if probe is None:
        return ["the probe gave no report"]
    failures = []
    for package in ("op_builder", "kernels"):
        if not Path(probe[package]).is_relative_to(site):
            failures.append(f"{package} came from {probe[package]}, not the venv's {site}")
    for name in OPS:
        module = probe["ops"].get(name)
        if module is None:
            failures.append(f"the probe did not load {name}")
            continue
        path = Path(module["file"])
        if not path.is_relative_to(site / "kernels" / "_ops") or not path.name.endswith(".abi3.so"):
            failures.append(f"{name} loaded {path}, not the installed kernels/_ops/{name}.abi3.so")
        if module["manifest_stable_abi"] != TARGET:
            failures.append(
                f"the installed manifest gives {name} stable_abi {module['manifest_stable_abi']!r}"
            )
        if not module["check_ok"]:
            failures.append(f"check_module({path}, {TARGET!r}) failed: {module['check']}")
    return failures


def judge_tests(
    returncode: int,
    counts: Mapping[str, int] | None,
    loaded: Mapping[str, str] | None,
    modules: Mapping[str, str],
) -> list[str]:
    """The copied tests ran (some, none failed) on the very modules the probe loaded."""
    if counts is None:
        return [f"pytest wrote no results (exit {returncode})"]
    failures = []
    if returncode != 0 or counts["failed"] or counts["errors"]:
        failures.append(f"pytest exit {returncode}: {counts['failed']} failed, {counts['errors']} errors")
    if counts["passed"] == 0:
        failures.append("pytest passed no test")
    if loaded is None:
        failures.append("the tests' plugin did not record the modules they used")
    else:
        for name, path in modules.items():
            if loaded.get(name) != path:
                failures.append(f"the tests used {loaded.get(name)} for {name}, not {path}")
    return failures


def junit_counts(path: Path) -> dict[str, int] | None:
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    total, failed, errors, skipped = (
        int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")
    )
    return {
        "passed": total - failed - errors - skipped,
        "failed": failed,
        "errors": errors,
        "skipped": skipped,
    }


def read_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def site_packages(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip()).resolve()


def check_env(
    label: str, python: Path, venv: Path, work: Path, tests: Sequence[str], root: Path, steps: Steps
) -> EnvResult:
    """verify, the probe and the copied tests in one venv, from outside the checkout, JIT off."""
    place = work / label
    run_dir = place / "run"
    test_paths = copy_tests(tests, run_dir, root)
    jit_dir = place / "no-jit-here"  # never created unless something compiled
    env = clean_env(DS_DISABLE_JIT="1", TORCH_EXTENSIONS_DIR=str(jit_dir))
    site = site_packages(python)
    failures: list[str] = []

    def verify() -> subprocess.CompletedProcess[str]:
        command = [str(python), "-m", "op_builder", "verify", *OPS, "--json"]
        return subprocess.run(command, cwd=run_dir, env=env, capture_output=True, text=True)

    done = steps.run(f"{label}: op_builder verify", verify)
    (place / "verify.json").write_text(done.stdout)
    (place / "verify.stderr").write_text(done.stderr)
    report = read_json(done.stdout)
    failures += judge_verify(done.returncode, report)
    for op in (report or {}).get("ops", []):
        test = op.get("selftest") or {}
        log(
            f"    {op.get('name')}: loaded from {op.get('source')}, self-test "
            f"{'pass' if test.get('ok') else 'FAIL'} ({test.get('isa')})"
        )

    def probe() -> subprocess.CompletedProcess[str]:
        command = [str(python), "-c", PROBE, TARGET, *OPS]
        return subprocess.run(command, cwd=run_dir, env=env, capture_output=True, text=True)

    done = steps.run(f"{label}: modules and check_module", probe)
    found = read_json(done.stdout)
    if found is None:
        failures.append(f"the probe failed (exit {done.returncode}): {done.stderr[-2000:]}")
    failures += judge_modules(found, site) if found is not None else []
    modules: dict[str, dict[str, Any]] = (found or {}).get("ops", {})
    for name, module in modules.items():
        verdict = "ok" if module["check_ok"] else f"FAILS: {module['check']}"
        log(f"    {name}: {module['file']}")
        log(f"      sha256 {module['sha256']}; check_module(..., {TARGET!r}) {verdict}")

    loaded_file = place / "tests-loaded.json"
    junit = place / "junit.xml"
    command = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        PLUGIN_NAME,
        "-q",
        f"--junitxml={junit}",
        *test_paths,
    ]
    test_env = {**env, "STABLE_ABI_PROOF_OPS": ",".join(OPS), "STABLE_ABI_PROOF_LOADED": str(loaded_file)}
    code = steps.run(
        f"{label}: kernel tests against torch",
        lambda: run_logged(
            command,
            place / "pytest.log",
            env=test_env,
            cwd=run_dir,
            show=lambda line: "passed" in line or "failed" in line or "module.__file__" in line,
        ),
    )
    counts = junit_counts(junit)
    loaded = read_json(loaded_file.read_text()) if loaded_file.exists() else None
    failures += judge_tests(code, counts, loaded, {n: m["file"] for n, m in modules.items()})
    if jit_dir.exists():
        failures.append(f"something was compiled just in time into {jit_dir}")
    return EnvResult(
        label=label,
        venv=str(venv),
        torch=(found or {}).get("torch") or "?",
        cuda=(found or {}).get("cuda"),
        verify=list((report or {}).get("ops", [])),
        modules=modules,
        tests={**(counts or {}), "files": test_paths, "loaded": loaded, "exit": code},
        seconds={k.split(": ", 1)[1]: v for k, v in steps.seconds.items() if k.startswith(f"{label}: ")},
        failures=tuple(failures),
    )


# ------------------------------------------------------------------ 4. across the venvs


def judge_across(envs: Sequence[EnvResult], wheel: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The same bytes of every module in the wheel and in each venv, on two torch releases >= the target."""
    failures = []
    releases = [stable_abi.release(e.torch) for e in envs]
    if len(set(releases)) != len(envs):
        failures.append("the venvs run the same torch release: " + ", ".join(e.torch for e in envs))
    wanted = stable_abi.parse_target(TARGET)
    for env, got in zip(envs, releases, strict=True):
        if got is None or got < wanted:
            failures.append(f"{env.label} runs torch {env.torch}, older than the target {TARGET}")
    for op in OPS:
        digests = {"wheel": wheel[op]["sha256"]} | {
            e.label: e.modules.get(op, {}).get("sha256") for e in envs
        }
        if len(set(digests.values())) != 1 or None in digests.values():
            failures.append(f"{op}'s module differs: " + ", ".join(f"{k} {v}" for k, v in digests.items()))
    return failures


def judge_rebuild(
    wheel: Mapping[str, Mapping[str, Any]], rebuilt: Mapping[str, Mapping[str, Any]], torch: str
) -> list[str]:
    """Every module of the wheel built again with another torch against the same headers: the same bytes."""
    return [
        f"{op}'s module built with torch {torch} differs: {rebuilt.get(op, {}).get('sha256')} "
        f"against {wheel[op]['sha256']}"
        for op in OPS
        if rebuilt.get(op, {}).get("sha256") != wheel[op]["sha256"]
    ]


def newest_cpu_torch() -> str:
    """What an image of the CPU target pins by default (imagegen build --stable-headers newest)."""
    from imagegen.imagespec import catalog  # deferred: the checkout's imagegen, as build_wheel's

    return max(catalog.CPU_TARGET.torch_versions(), key=lambda v: stable_abi.release(v) or (0, 0))


def torch_headers(version: str) -> Path:
    """torch ``version``'s include folder, from imagegen's cache or read out of its wheel on pip's index."""
    from imagegen.errors import ImagegenError
    from imagegen.runs.torch_headers import torch_include

    try:
        return torch_include(version)
    except ImagegenError as exc:
        raise SetupError(f"torch {version}'s headers: {exc.message}") from None


# ------------------------------------------------------------------ the pipeline


def machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    return {
        "arch": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
    }


def prove(options: Options) -> ProofReport:
    """Build once, check in two venvs, compare. Raises ProofError when a step cannot go on."""
    # Deferred: the build's torch is this Python's; importing it costs seconds, and --help need not.
    import torch

    build_torch = torch.__version__
    requirement = torch_requirement(options.torch)
    built, other = stable_abi.release(build_torch), stable_abi.release(options.torch)
    if other is None or other < stable_abi.parse_target(TARGET):
        raise BadInput(f"--torch {options.torch}: the stable modules need torch {TARGET} or newer")
    if other == built:
        raise BadInput(f"--torch {options.torch}: the build's torch is {build_torch}; name another release")
    if built is None or built < stable_abi.parse_target(TARGET):
        raise BadInput(f"this Python's torch {build_torch} builds no stable modules (they need {TARGET}+)")
    # Each run starts afresh; only the folders this script makes are emptied (--work may be a
    # folder that holds other things), and the venvs, elsewhere, stay.
    for made in WORK_FOLDERS:
        shutil.rmtree(options.work / made, ignore_errors=True)
    options.work.mkdir(parents=True, exist_ok=True)
    steps = Steps()
    start = time.perf_counter()
    log(f"stable ABI proof: {', '.join(OPS)} built once with torch {build_torch}")
    log(f"  checked with it and with {requirement}")
    source = source_tree(options.revision, options.work / "tree")
    what = f"revision {source.revision} ({source.commit[:12]})" if source.revision else "the working tree"
    log(
        f"  sources: {what}" + (f", with {len(source.modified)} uncommitted edits" if source.modified else "")
    )
    headers_version = options.headers or newest_cpu_torch()
    include = steps.run(f"torch {headers_version}'s headers", partial(torch_headers, headers_version))
    log(f"  against torch {headers_version}'s headers ({include})")
    wheel = steps.run("build the wheel", partial(build_wheel, options.work, source.root, headers=include))
    in_wheel = wheel_modules(wheel)
    failures = judge_wheel(in_wheel)
    for entry in in_wheel.values():
        log(f"    {entry['member']}  sha256 {entry['sha256']}")
    plan = zip(ENV_LABELS, (f"torch=={build_torch}", requirement), strict=True)
    envs = []
    for label, wanted in plan:
        venv = options.venvs / ("torch-" + wanted.removeprefix("torch==").replace("*", "x"))
        logs = options.work / "logs"
        python = steps.run(
            f"{label}: venv with {wanted}", partial(ensure_venv, venv, wanted, options.install_timeout, logs)
        )
        installing = partial(install_wheel, python, wheel, logs / f"wheel-install-{label}.log")
        steps.run(f"{label}: install the wheel", installing)
        envs.append(check_env(label, python, venv, options.work, options.tests, source.root, steps))
        other_python = python
    failures += judge_across(envs, in_wheel)
    rebuild = partial(
        build_wheel, options.work / OTHER_BUILD, source.root, python=str(other_python), headers=include
    )
    other_build = wheel_modules(steps.run(f"{ENV_LABELS[-1]}: build the wheel again", rebuild))
    failures += judge_rebuild(in_wheel, other_build, envs[-1].torch)
    ok = not failures and all(e.ok for e in envs)
    return ProofReport(
        ok=ok,
        date=datetime.date.today().isoformat(),
        machine=machine(),
        target=TARGET,
        build_torch=build_torch,
        source={"revision": source.revision, "commit": source.commit, "modified": list(source.modified)},
        wheel=wheel.name,
        wheel_modules=in_wheel,
        envs=tuple(envs),
        failures=tuple(failures),
        seconds={**steps.seconds, "total": round(time.perf_counter() - start, 1)},
        headers=headers_version,
        other_build=other_build,
    )


def summary(report: ProofReport) -> Iterator[str]:
    yield ""
    yield f"built once with torch {report.build_torch} ({report.wheel}); target torch >= {report.target}"
    source = report.source
    yield f"  from commit {source['commit']}" + (
        f" ({source['revision']})"
        if source["revision"]
        else f", working tree: {len(source['modified'])} uncommitted edits"
    )
    for env in report.envs:
        tests = env.tests
        verified = "ok" if not judge_verify(0, {"ops": env.verify}) else "FAIL"
        yield (
            f"  {env.label:12} torch {env.torch:16} verify {verified}"
            f"  tests {tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed, "
            f"{tests.get('skipped', 0)} skipped  {'ok' if env.ok else 'FAIL'}"
        )
        for failure in env.failures:
            yield f"    - {failure}"
    yield f"  both builds against torch {report.headers}'s headers"
    for op, entry in report.wheel_modules.items():
        rebuilt = report.other_build.get(op, {}).get("sha256")
        same = (
            "the same from the other torch's build" if rebuilt == entry["sha256"] else f"rebuilt: {rebuilt}"
        )
        yield f"  {op:12} sha256 {entry['sha256']}  {same}"
    for failure in report.failures:
        yield f"  - {failure}"
    verdict = "PROVEN: the same module bytes, built with either, load and compute right on " + " and ".join(
        f"torch {e.torch}" for e in report.envs
    )
    yield verdict if report.ok else "NOT PROVEN"
    yield f"took {report.seconds.get('total', 0):.0f}s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--torch", default=DEFAULT_TORCH, help=f"the second torch release (default {DEFAULT_TORCH})"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=REPO / "build" / "stable-abi-proof",
        help="wheel, copied sources and tests, logs (its folders of them emptied first)",
    )
    parser.add_argument(
        "--venvs",
        type=Path,
        default=REPO / "build" / "stable-abi-venvs",
        help="the two venvs, kept and reused between runs",
    )
    parser.add_argument(
        "--headers",
        metavar="VERSION",
        help="the torch release whose headers both builds compile against "
        "(default: the catalog's newest CPU torch)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON report")
    parser.add_argument(
        "--test",
        action="append",
        dest="tests",
        metavar="FILE",
        help="a test file under tests/ to run in both venvs (repeatable; default: "
        + ", ".join(DEFAULT_TESTS)
        + ")",
    )
    parser.add_argument(
        "--revision",
        metavar="REV",
        help="build and test this git revision (e.g. HEAD) rather than the working tree and its edits",
    )
    parser.add_argument(
        "--install-timeout",
        type=float,
        default=25 * 60,
        help="seconds a venv's pip install may take (default 1500)",
    )
    args = parser.parse_args(argv)
    options = Options(
        torch=args.torch,
        work=args.work.resolve(),
        venvs=args.venvs.resolve(),
        out=args.out.resolve(),
        tests=tuple(args.tests or DEFAULT_TESTS),
        install_timeout=args.install_timeout,
        revision=args.revision,
        headers=args.headers,
    )
    try:
        report = prove(options)
    except ProofError as exc:
        print(f"stable ABI proof: {exc}", file=sys.stderr)
        return exc.exit_code
    for line in summary(report):
        log(line)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    log(f"wrote {options.out}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
