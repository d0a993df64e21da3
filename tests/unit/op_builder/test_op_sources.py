"""Op packages from outside the repository: discovery, origins, clashes and invalid builders.

Real packages on disk, read by real ``python -m op_builder`` processes (each process imports a
package once, so a subprocess per case keeps the cases apart). Compiling their ops is the
loader tier's and the image tier's part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.op_package_files import builder_source, square_package, unique, write_package

REPO = Path(__file__).resolve().parents[3]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH"))}
    clean.update({"PYTHONPATH": str(REPO), **env})
    return subprocess.run(
        [sys.executable, "-m", "op_builder", *args], capture_output=True, text=True, env=clean, cwd=REPO
    )


def assert_bad_input(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one error line with a hint, no traceback, and every fragment in the message."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and "hint: " in done.stderr
    for fragment in fragments:
        assert fragment in done.stderr


def test_a_directory_package_joins_every_command_with_its_origin(tmp_path: Path) -> None:
    op = unique("sq_dir")
    root = square_package(tmp_path, unique("pkg_dir"), op)
    report = run("report", "--json", "--op-source", str(root))
    assert report.returncode == 0, report.stderr
    ops = {o["name"]: o for o in json.loads(report.stdout)["ops"]}
    assert ops["cpu_adam"]["origin"]["kind"] == "builtin"
    assert ops[op]["origin"] == {
        "kind": "directory",
        "where": str(root),
        "package": root.name,
        "root": str(root),
    }
    assert list(ops)[-1] == op  # ours first, then the package's

    # The environment variable is the same as the flag, for setup.py and pip wheel.
    flags = run("flags", op, "--json", DS_OP_SOURCES=str(root))
    assert flags.returncode == 0, flags.stderr
    data = json.loads(flags.stdout)
    assert data["sources"] == [str(root / "csrc" / "square.cpp")]  # relative to the package
    assert data["module"] == f"kernels._ops.{op}"

    # DS_BUILD_<NAME> selects it like one of ours.
    plan = run("plan", "--json", DS_OP_SOURCES=str(root), DS_BUILD_OPS="0", **{f"DS_BUILD_{op.upper()}": "1"})
    assert plan.returncode == 0, plan.stderr
    assert [o["name"] for o in json.loads(plan.stdout)["ops"]] == [op]

    table = run("report", "--op-source", str(root))
    assert f"directory {root}" in table.stdout


def test_without_the_source_the_op_is_unknown(tmp_path: Path) -> None:
    op = unique("sq_unknown")
    square_package(tmp_path, unique("pkg_unknown"), op)
    assert_bad_input(run("flags", op), f"unknown op {op!r}")


def test_an_installed_distribution_registers_ops_through_entry_points(tmp_path: Path) -> None:
    # A real (if hand-written) installed distribution: importlib.metadata finds its dist-info
    # on sys.path, as it finds a pip-installed one in site-packages.
    site = tmp_path / "site"
    site.mkdir()
    by_class, by_module = unique("sq_ep_class"), unique("sq_ep_module")
    package = unique("pkg_ep")
    write_package(
        site,
        package,
        builder_source("ByClass", by_class) + "\n\n" + builder_source("Other", unique("sq_not_listed")),
    )
    (site / package / "more.py").write_text(
        "from op_builder import CPUOpBuilder\n\n\n" + builder_source("ByModule", by_module)
    )
    dist = site / "acme_test_ops-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-test-ops\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[op_builder.ops]\n{by_class} = {package}.builders:ByClass\nmore = {package}.more\n"
    )
    done = run("report", "--json", PYTHONPATH=f"{REPO}{os.pathsep}{site}")
    assert done.returncode == 0, done.stderr
    ops = {o["name"]: o["origin"] for o in json.loads(done.stdout)["ops"]}
    assert ops[by_class]["kind"] == "entry point"
    assert ops[by_class]["where"] == f"acme-test-ops 1.0: {by_class} = {package}.builders:ByClass"
    assert ops[by_module]["where"] == f"acme-test-ops 1.0: more = {package}.more"
    assert ops[by_class]["root"] == str(site / package)
    assert not any(name.startswith("sq_not_listed") for name in ops)  # only what the entry points name


def test_a_broken_entry_point_names_its_distribution(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "broken_ops-2.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-ops\nVersion: 2.0\n")
    (dist / "entry_points.txt").write_text("[op_builder.ops]\nx = no_such_module_anywhere:X\n")
    done = run("report", PYTHONPATH=f"{REPO}{os.pathsep}{site}")
    assert_bad_input(done, "broken-ops 2.0", "no_such_module_anywhere", "does not load")


def test_a_name_of_ours_is_a_clash_naming_both_origins(tmp_path: Path) -> None:
    root = write_package(tmp_path, unique("pkg_clash"), builder_source("Mine", "cpu_adam"))
    done = run("report", "--op-source", str(root))
    assert_bad_input(done, "'cpu_adam'", f"directory {root}", "clashes", "op_builder")


def test_two_packages_with_one_op_name_clash(tmp_path: Path) -> None:
    op = unique("sq_twice")
    first = square_package(tmp_path, unique("pkg_first"), op)
    second = square_package(tmp_path, unique("pkg_second"), op)
    done = run("report", "--op-source", str(first), "--op-source", str(second))
    assert_bad_input(done, f"directory {second}", f"directory {first}", "clashes")


@pytest.mark.parametrize(
    ("builders", "expected"),
    [
        (builder_source("NoSources", "nosrc", sources="()"), "lists no sources"),
        (builder_source("Missing", "missing", sources='("csrc/nowhere.cpp",)'), "csrc/nowhere.cpp"),
        (
            builder_source(
                "Inverted", "inverted", base="CUDAOpBuilder", extra="arch_limits = ArchLimits((9, 0), (8, 0))"
            ),
            "admit nothing",
        ),
        (
            builder_source(
                "Garbled", "garbled", base="CUDAOpBuilder", extra='arch_limits = ArchLimits(("8", 0))'
            ),
            "is not a (major, minor) capability",
        ),
        (
            builder_source("Flags", "flags", base="CUDAOpBuilder", extra='nvcc_flags = "-ftz=false"'),
            "is not a tuple of strings",
        ),
        (builder_source("BadName", "My-Op"), "op name 'My-Op' is not valid"),
        (builder_source("BadTest", "badtest", selftest="no_colon_here"), "is not 'module:function'"),
        (
            "class Plain:\n    name = 'plain'\n\n\nimport no_such_dependency_of_this_package\n",
            "does not import",
        ),
        ("def broken(:\n", "SyntaxError"),
    ],
)
def test_an_invalid_package_is_bad_input_naming_its_file(
    tmp_path: Path, builders: str, expected: str
) -> None:
    root = write_package(tmp_path, unique("pkg_bad"), builders)
    done = run("report", "--op-source", str(root))
    assert_bad_input(done, expected, str(root / "builders.py"))


def test_a_folder_that_is_not_an_op_package_says_what_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert_bad_input(run("report", "--op-source", str(tmp_path / "empty")), "no __init__.py or builders.py")
    assert_bad_input(run("report", "--op-source", str(tmp_path / "absent")), "is not a directory")
    dashed = write_package(tmp_path, "dashed-name", builder_source("Ok", "ok_op"))
    assert_bad_input(run("report", "--op-source", str(dashed)), "cannot be imported as a Python package")


def test_a_package_op_without_a_self_test_fails_its_self_test(tmp_path: Path) -> None:
    """Verification proves every op it passes: an op that declares no self-test cannot pass one."""
    op = unique("sq_untested")
    root = write_package(tmp_path, unique("pkg_untested"), builder_source("Untested", op))
    code = (
        "import sys\n"
        "from op_builder.selftest import selftest_for, SelfTestContext\n"
        "import torch\n"
        f"test = selftest_for({op!r})\n"
        "try:\n"
        "    test.run(SelfTestContext(torch.device('cpu')))\n"
        "except LookupError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "DS_OP_SOURCES": str(root)},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{op} declares no self-test" in done.stdout
