"""Op packages in images: the spec, the Dockerfile, the labels, staging, matrix and `imagegen ops`.

In-process (typer's runner and the spec functions) on real package folders; each test names
its package uniquely, since a process imports a package once. The image built from one is the
integration tier's (tests/integration/test_op_package_image.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.building.staging import staged_context
from imagegen.cli import app
from imagegen.imagespec.spec import SpecInput, build_spec, spec_input
from imagegen.render.dockerfile import labels, render
from tests.op_package_files import square_package, unique

REPO = Path(__file__).resolve().parents[4]
runner = CliRunner()


@pytest.fixture
def package(tmp_path: Path) -> tuple[Path, str]:
    op = unique("img_sq")
    return square_package(tmp_path, unique("img_pkg"), op), op


def independent_digest(root: Path, relative_files: list[str]) -> str:
    """The digest as the labels define it, computed here from the file list we expect."""
    outer = hashlib.sha256()
    for name in sorted(relative_files):
        outer.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return "sha256:" + outer.hexdigest()


PACKAGE_FILES = ["__init__.py", "builders.py", "csrc/square.cpp", "selftest.py"]


def test_the_dockerfile_builds_the_package_ops_and_labels_their_sources(package: tuple[Path, str]) -> None:
    root, op = package
    spec = build_spec(SpecInput(cpu=True, ops=f"{op},cpu_adam", op_sources=(str(root),)))
    assert spec.ops == ("cpu_adam", op)  # ours first, in registry order
    assert spec.build_variables == ("DS_BUILD_CPU_ADAM", f"DS_BUILD_{op.upper()}")
    text = render(spec)
    assert f"# Needs in the context: _imagegen/op-sources/{root.name}/" in text
    assert "COPY _imagegen/op-sources/ /opt/op-sources/" in text
    assert text.count(f"DS_OP_SOURCES=/opt/op-sources/{root.name}") == 2  # build stage and runtime
    assert f"python -m op_builder verify cpu_adam {op}" in text
    assert str(root) not in text  # never a host path
    found = dict(labels(spec))
    assert json.loads(found["io.imagegen.external-ops"]) == op
    digest = independent_digest(root, PACKAGE_FILES)
    assert json.loads(found["io.imagegen.op-packages"]) == f"{root.name}={digest}"


def test_the_digest_and_tag_follow_the_sources_only(package: tuple[Path, str]) -> None:
    root, op = package
    inp = SpecInput(cpu=True, ops=op, op_sources=(str(root),))
    before = build_spec(inp)
    # Build outputs and caches are not sources: neither staged nor in the digest.
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "builders.cpython-311.pyc").write_bytes(b"\0")
    (root / "build").mkdir()
    (root / "build" / "square.o").write_bytes(b"\0")
    assert build_spec(inp).tag == before.tag
    # A .dockerignore in the package leaves its patterns out too.
    (root / "notes").mkdir()
    (root / "notes" / "draft.md").write_text("scratch")
    (root / ".dockerignore").write_text("# scratch\nnotes/\n")
    assert build_spec(inp).op_packages[0].files == tuple(PACKAGE_FILES)
    # A changed source is a new image.
    (root / "csrc" / "square.cpp").write_text((root / "csrc" / "square.cpp").read_text() + "// changed\n")
    after = build_spec(inp)
    assert after.tag != before.tag
    assert after.op_packages[0].digest == independent_digest(root, PACKAGE_FILES)


def test_staging_copies_exactly_the_package_files(package: tuple[Path, str]) -> None:
    root, op = package
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    spec = build_spec(SpecInput(cpu=True, ops=op, op_sources=(str(root),)))
    with staged_context(spec, REPO) as context:
        staged = context / "_imagegen" / "op-sources" / root.name
        files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
        assert files == PACKAGE_FILES
        assert (staged / "csrc" / "square.cpp").read_bytes() == (root / "csrc" / "square.cpp").read_bytes()


def test_the_environment_variable_names_packages_too(package: tuple[Path, str]) -> None:
    root, op = package
    spec = build_spec(spec_input({"IMAGEGEN_OP_SOURCES": str(root)}, cpu=True, ops=op))
    assert [p.root for p in spec.op_packages] == [root]


def test_a_package_with_no_selected_op_is_left_out_with_a_warning(package: tuple[Path, str]) -> None:
    root, _ = package
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", op_sources=(str(root),)))
    assert spec.op_packages == ()
    assert "op-sources" not in render(spec)
    assert any(f"op package {root}: none of its ops" in w for w in spec.warnings)


def test_cli_errors_are_exit_2_with_a_hint(tmp_path: Path, package: tuple[Path, str]) -> None:
    root, op = package
    # The package's op without the package.
    done = runner.invoke(app, ["dockerfile", "--cpu", "--ops", op])
    assert done.exit_code == 2 and f"unknown op {op!r}" in done.output
    # Two packages one name: an image imports each package by its folder's name.
    other = square_package(tmp_path / "elsewhere", root.name, unique("img_other"))
    done = runner.invoke(
        app, ["dockerfile", "--cpu", "--ops", op, "--op-source", str(root), "--op-source", str(other)]
    )
    assert done.exit_code == 2 and f"two op packages are named {root.name!r}" in done.output
    # Not a package.
    done = runner.invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam", "--op-source", str(tmp_path)])
    assert done.exit_code == 2 and "is not an op package" in done.output and "Traceback" not in done.output


def test_ops_lists_package_ops_with_their_origin(package: tuple[Path, str]) -> None:
    root, op = package
    done = runner.invoke(app, ["ops", "--json", "--op-source", str(root)])
    assert done.exit_code == 0, done.output
    rows = {row["name"]: row for row in json.loads(done.stdout)["ops"]}
    assert rows[op]["origin"]["kind"] == "directory" and rows[op]["origin"]["root"] == str(root)
    assert rows[op]["build_variable"] == f"DS_BUILD_{op.upper()}"
    assert rows["cpu_lion"]["origin"]["kind"] == "builtin"


def test_matrix_takes_the_packages_ops_into_every_image(tmp_path: Path, package: tuple[Path, str]) -> None:
    root, op = package
    out = tmp_path / "matrix"
    done = runner.invoke(app, ["matrix", "--out", str(out), "--op-source", str(root)])
    assert done.exit_code == 0, done.output
    cpu = (out / "cpu" / "Dockerfile").read_text()
    assert f"DS_BUILD_{op.upper()}=1" in cpu and f"_imagegen/op-sources/{root.name}/" in cpu
    assert f"the build context needs _imagegen/op-sources/{root.name}/" in done.output
    # --check compares against the same rendering, package included.
    assert (
        runner.invoke(app, ["matrix", "--out", str(out), "--check", "--op-source", str(root)]).exit_code == 0
    )
    assert runner.invoke(app, ["matrix", "--out", str(out), "--check"]).exit_code == 1


def test_verify_knows_the_ops_an_image_labels_and_catches_our_typos() -> None:
    from imagegen.verify.container import check_image_op_names
    from op_builder.errors import UnknownOpError

    labels = {"io.imagegen.ops": "cpu_adam,acme_rmsnorm"}
    check_image_op_names(["acme_rmsnorm", "cpu_adam", "cpu_lion"], labels)  # ours, or the image's
    with pytest.raises(UnknownOpError) as info:
        check_image_op_names(["acme_rmsnrm"], labels)
    assert "did you mean 'acme_rmsnorm'" in (info.value.hint or "")
    # Before the engine is asked: a near miss of one of ours is a typo; another name may be the image's.
    done = runner.invoke(app, ["verify", "no-such-image-here:1", "--ops", "cpu_adm"])
    assert done.exit_code == 2 and "unknown op 'cpu_adm'" in done.output
