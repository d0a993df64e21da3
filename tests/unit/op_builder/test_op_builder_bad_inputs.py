"""``python -m op_builder`` and op-package discovery against bad input: each case meets the
contract (exit code, one ``error:`` line with a hint, no traceback, one JSON document under
``--json``) instead of passing silently, failing later inside an image build, or hanging.

Real op packages on disk (tests/op_package_files.py), read by real subprocesses: a package is
imported once per process. Nothing here compiles; self-tests at run time are in
tests/kernels/test_selftest_outcomes.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from op_builder import SHARED_INCLUDE_DIR, manifest
from op_builder.errors import OpLoadError
from tests.op_package_files import builder_source, square_package, unique, write_package

REPO = Path(__file__).resolve().parents[3]


def _env(**extra: str) -> dict[str, str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH", "OP_BUILDER"))
    }
    clean.update({"PYTHONPATH": str(REPO), **extra})
    return clean


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "op_builder", *args],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=REPO,
        timeout=300,
    )


def strict_json(text: str) -> Any:
    """Parse as JSON proper: Python's json reads NaN and Infinity, which JSON does not have."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def assert_bad_input(done: subprocess.CompletedProcess[str], *fragments: str, code: int = 2) -> None:
    """Exit ``code``, one error line and a hint on stderr, no traceback, every fragment said."""
    detail = f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == code, detail
    assert "Traceback" not in done.stdout + done.stderr, detail
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "hint: " in done.stderr, detail
    for fragment in fragments:
        assert fragment in errors[0], detail


def assert_json_error(done: subprocess.CompletedProcess[str], *fragments: str, code: int = 2) -> None:
    """Under --json: stdout is exactly one JSON document, the error with its hint and code."""
    detail = f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == code, detail
    assert "Traceback" not in done.stdout + done.stderr, detail
    doc = strict_json(done.stdout)
    assert set(doc) == {"error"} and set(doc["error"]) == {"message", "hint", "exit_code"}, doc
    assert doc["error"]["exit_code"] == code and doc["error"]["hint"], doc
    for fragment in fragments:
        assert fragment in doc["error"]["message"], doc


# ------------------------------------------------------------------ user code that exits at import


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        ("import sys\nsys.exit(0)\n", "sys.exit(0)"),
        ("raise SystemExit('bye')\n", "sys.exit('bye')"),
        ("class Odd(BaseException):\n    pass\n\n\nraise Odd('neither Exception nor exit')\n", "Odd"),
    ],
    ids=["exit-0", "exit-message", "base-exception"],
)
@pytest.mark.parametrize("command", ["report", "plan"])
def test_builders_that_exit_at_import_are_bad_input_naming_the_package(
    tmp_path: Path, tail: str, said: str, command: str
) -> None:
    root = write_package(tmp_path, unique("pkg_exits"), builder_source("Exits", unique("sq_exits")) + tail)
    done = run(command, "--op-source", str(root))
    assert_bad_input(done, str(root / "builders.py"), said)
    assert_json_error(run(command, "--json", "--op-source", str(root)), f"{root.name}.builders", said)


def test_a_builder_whose_construction_exits_is_bad_input(tmp_path: Path) -> None:
    extra = "def __init__(self):\n    import sys\n    sys.exit(0)\n"
    root = write_package(
        tmp_path, unique("pkg_init_exits"), builder_source("Init", unique("sq_init"), extra=extra)
    )
    assert_bad_input(run("report", "--op-source", str(root)), "Init in", "sys.exit(0)")


# ------------------------------------------------------------------ builder attributes of the wrong type


@pytest.mark.parametrize(
    ("field", "builder_kwargs", "hint"),
    [
        ("runtime_packages", {"extra": 'runtime_packages = ("libgomp1")'}, "('libgomp1',)"),
        ("sources", {"sources": "42"}, 'sources = ("csrc/my_op.cpp",)'),
        ("sources", {"sources": '("csrc/square.cpp")'}, "('csrc/square.cpp',)"),
        ("include_dirs", {"extra": 'include_dirs = "includes"'}, "('includes',)"),
        ("defines", {"extra": 'defines = ["-DFAST"]'}, 'defines = ("-DMY_OP_FAST",)'),
        ("sources", {"sources": '("csrc/square.cpp", 7)'}, 'sources = ("csrc/my_op.cpp",)'),
        ("description", {"extra": "description = None"}, "description ="),
        ("system_libraries", {"extra": 'system_libraries = ("aio",)'}, "SystemLibrary"),
    ],
)
def test_a_builder_attribute_of_the_wrong_type_names_the_file_and_the_attribute(
    tmp_path: Path, field: str, builder_kwargs: dict[str, str], hint: str
) -> None:
    op = unique("sq_types")
    root = write_package(tmp_path, unique("pkg_types"), builder_source("Typed", op, **builder_kwargs))
    done = run("report", "--op-source", str(root))
    assert_bad_input(done, str(root / "builders.py"), f"{op}'s {field}")
    assert hint in done.stderr
    assert "source c " not in done.stderr  # a string is not read character by character


# ------------------------------------------------------------------ refused up front, not inside the build


@pytest.mark.parametrize("source", ["../outside.cpp", "/etc/hostname", "csrc/../../outside.cpp"])
def test_a_source_outside_the_package_is_refused(tmp_path: Path, source: str) -> None:
    (tmp_path / "outside.cpp").write_text("// not in the package\n")
    op = unique("sq_outside")
    root = write_package(tmp_path, unique("pkg_outside"), builder_source("Out", op, sources=f"({source!r},)"))
    assert_bad_input(
        run("report", "--op-source", str(root)), f"{op}'s source {source}", "outside the op package"
    )
    assert_bad_input(run("plan", "--op-source", str(root)), "outside the op package")


def test_an_include_dir_outside_the_package_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    op = unique("sq_inc")
    root = write_package(
        tmp_path, unique("pkg_inc"), builder_source("Inc", op, extra='include_dirs = ("../shared",)')
    )
    assert_bad_input(run("report", "--op-source", str(root)), f"{op}'s include dir ../shared")


def test_the_shared_headers_are_the_one_folder_outside_a_package_it_may_include(tmp_path: Path) -> None:
    """op_builder.SHARED_INCLUDE_DIR (op_abi.h and the other headers a binding is written against)
    comes with op_builder wherever it runs, so a package names it; the folder above it, or another
    folder of ours beside it, lies outside the package like any other and is refused, the hint
    naming the one that is accepted."""
    shared = Path(SHARED_INCLUDE_DIR)
    op = unique("sq_shared")
    names_it = "from op_builder import SHARED_INCLUDE_DIR\n\n" + builder_source(
        "Shared", op, extra='include_dirs = ("includes", SHARED_INCLUDE_DIR)\nstable_abi = "2.10"'
    )
    root = write_package(tmp_path, unique("pkg_shared"), names_it)
    done = run("flags", op, "--op-source", str(root), "--json")
    assert done.returncode == 0, done.stderr
    assert strict_json(done.stdout)["include_dirs"] == [SHARED_INCLUDE_DIR]  # no includes/ here
    for near in (shared.parent, shared.parent / "optim" / "includes"):
        bad = unique("sq_near")
        builders = builder_source("Near", bad, extra=f"include_dirs = ({str(near)!r},)")
        done = run("report", "--op-source", str(write_package(tmp_path, unique("pkg_near"), builders)))
        assert_bad_input(done, f"{bad}'s include dir {near}", "outside the op package")
        assert "op_builder.SHARED_INCLUDE_DIR" in done.stderr


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        ("kernels", "imagegen's own package 'kernels'"),
        ("op_builder", "imagegen's own package 'op_builder'"),
        ("json", "the standard library's module 'json'"),
        ("torch", "the package 'torch' at"),
        ("import", "cannot be imported as a Python package"),
    ],
)
def test_a_package_folder_whose_name_is_taken_is_refused(tmp_path: Path, folder: str, said: str) -> None:
    root = write_package(tmp_path, folder, builder_source("Taken", unique("sq_taken")))
    for command in ("report", "plan"):
        assert_bad_input(run(command, "--op-source", str(root)), str(root), said)


@pytest.mark.parametrize("name", ["import", "class", "lambda"])
def test_an_op_named_by_a_keyword_is_refused(tmp_path: Path, name: str) -> None:
    root = write_package(tmp_path, unique("pkg_keyword"), builder_source("Keyword", name))
    assert_bad_input(run("report", "--op-source", str(root)), f"op name {name!r} is not valid", "keyword")


def test_imagegen_refuses_them_too(tmp_path: Path) -> None:
    """imagegen ops / dockerfile find op packages through op_builder's discovery: the same refusal."""
    (tmp_path / "outside.cpp").write_text("// not in the package\n")
    outside = write_package(
        tmp_path, unique("pkg_ig"), builder_source("Out", unique("sq_ig"), sources='("../outside.cpp",)')
    )
    exits = write_package(
        tmp_path,
        unique("pkg_ig_exit"),
        builder_source("E", unique("sq_ig_exit")) + "import sys\nsys.exit(0)\n",
    )
    for root, said in ((outside, "outside the op package"), (exits, "sys.exit(0)")):
        for args in (["ops"], ["dockerfile", "--cpu", "--ops", "cpu_adam"]):
            done = subprocess.run(
                [sys.executable, "-m", "imagegen", *args, "--op-source", str(root)],
                capture_output=True,
                text=True,
                env=_env(IMAGEGEN_DEBUG=""),
                cwd=REPO,
                timeout=300,
            )
            assert done.returncode == 2, done.stdout + done.stderr
            assert said in done.stderr and "Traceback" not in done.stderr
            assert done.stdout == ""


def test_a_valid_package_is_still_accepted(tmp_path: Path) -> None:
    """The checks above refuse what is wrong only: a package as imagegen new-op writes it passes."""
    op = unique("sq_fine")
    root = square_package(tmp_path, unique("pkg_fine"), op)
    done = run("report", "--json", "--op-source", str(root))
    assert done.returncode == 0, done.stderr
    assert op in [entry["name"] for entry in strict_json(done.stdout)["ops"]]


# ------------------------------------------------------------------ --json is JSON, whatever happens


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--json", "--no-such-option"],
        ["selftest", "--json", "--device", "tpu"],
        ["--json"],
        ["report", "--json", "--cuda"],
    ],
)
def test_usage_errors_under_json_are_one_json_error(args: list[str]) -> None:
    done = run(*args)
    assert_json_error(done)
    assert "usage:" not in done.stdout + done.stderr


def test_usage_errors_without_json_are_one_message_with_a_hint() -> None:
    assert_bad_input(run("verify", "--no-such-option"), "--no-such-option")
    assert_bad_input(run("selftest", "--device", "tpu"), "tpu")


def _sigint_as_a_terminal_sends_it() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_under_json_is_a_json_error_with_exit_130(tmp_path: Path) -> None:
    # A builders.py that says when it is being imported, then takes its time: the SIGINT lands
    # while the command runs, as a user's Ctrl-C would.
    marker = tmp_path / "importing"
    slow = f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)\n"
    root = write_package(tmp_path, unique("pkg_slow"), builder_source("Slow", unique("sq_slow")) + slow)
    process = subprocess.Popen(
        [sys.executable, "-m", "op_builder", "report", "--json", "--op-source", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=REPO,
        # SIGINT as a terminal delivers it, whatever this test process inherited: a shell that
        # starts tests in the background ignores it, and a blocked signal mask survives exec.
        preexec_fn=_sigint_as_a_terminal_sends_it,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert strict_json(stdout) == {"error": {"message": "interrupted", "hint": None, "exit_code": 130}}


def test_a_closed_pipe_ends_quietly() -> None:
    # `python -m op_builder report --json | true`: the reader is gone before the JSON is written.
    reader_gone = subprocess.run(
        f'{sys.executable} -m op_builder report --json | true; echo "exit=${{PIPESTATUS[0]}}" >&2',
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=300,
    )
    assert "Traceback" not in reader_gone.stderr and "BrokenPipe" not in reader_gone.stderr, (
        reader_gone.stderr
    )
    assert "exit=1" in reader_gone.stderr  # as imagegen ends on a closed pipe


# ------------------------------------------------------------------ other inputs


def test_binary_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "module.so"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    assert_bad_input(run("binary", str(fifo)), "is not a regular file", "FIFO")
    assert_json_error(run("binary", "--json", str(fifo)), "FIFO")
    assert_bad_input(run("binary", str(tmp_path)), "a directory")


def test_verify_and_selftest_take_each_op_once() -> None:
    verify = run("verify", "cpu_lion", "cpu_adam", "cpu_lion", "--json")  # nothing installed: quick failures
    assert [op["name"] for op in strict_json(verify.stdout)["ops"]] == ["cpu_lion", "cpu_adam"]
    selftest = run("selftest", "fused_lion", "transformer", "fused_lion", "--device", "cpu", "--json")
    assert [op["name"] for op in strict_json(selftest.stdout)["ops"]] == ["fused_lion", "transformer"]


@pytest.mark.skipif(
    subprocess.run(
        [sys.executable, "-c", "import torch, sys; sys.exit(torch.cuda.is_available())"], check=False
    ).returncode
    != 0,
    reason="checks what a machine without a GPU reports",
)
def test_selftest_on_cuda_without_a_gpu_runs_nothing_and_fails() -> None:
    """``selftest cpu_adam --device cuda`` used to run on the CPU and exit 0: a GPU run claimed."""
    done = run("selftest", "cpu_adam", "--device", "cuda", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    (op,) = strict_json(done.stdout)["ops"]
    assert op["ok"] is False and op["seconds"] == 0.0 and op["max_abs_err"] is None
    assert "--device cuda" in op["skipped"] and "no GPU" in op["skipped"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[]", "JSON array, not an object"),
        ('"ops"', "JSON string, not an object"),
        ("null", "JSON null, not an object"),
        ('{"format": 1, "ops": []}', "ops are a JSON array"),
        ('{"format": 1, "ops": {"cpu_adam": 3}}', "op 'cpu_adam' is a JSON number"),
        (
            '{"format": 1, "torch": "2.13.0", "cuda": null, "hip": null, "accelerator": "cpu", '
            '"python": "3.11", "ops": {"cpu_adam": {"module": "m", "target": "cpu", "archs": "8.0"}}}',
            "archs '8.0' is not a list of strings",
        ),
        ('{"format": 1, "ops": {}, "torch": 2}', "torch 2 is not a string"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_unreadable_not_a_crash(
    tmp_path: Path, text: str, said: str
) -> None:
    target = manifest.manifest_path(tmp_path)
    target.parent.mkdir(parents=True)
    target.write_text(text)
    manifest.read_installed.cache_clear()
    try:
        with pytest.raises(OpLoadError, match="unreadable") as info:
            manifest.read_installed(tmp_path)
    finally:
        manifest.read_installed.cache_clear()
    assert said in info.value.message and info.value.hint
