"""The imagegen CLI without a container engine: ops, dockerfile, error reporting, logging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen import errors, files, log
from imagegen.building.staging import staged_context
from imagegen.cli import app
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import render
from op_builder import ALL_OPS

runner = CliRunner()
REPO = Path(__file__).resolve().parents[4]


def test_ops_json_lists_every_op_with_target_and_runtime_packages() -> None:
    result = runner.invoke(app, ["ops", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["ops"]
    assert [r["name"] for r in rows] == list(ALL_OPS)
    for row in rows:
        builder = ALL_OPS[row["name"]]
        assert row["target"] == builder.target
        assert row["runtime_packages"] == list(builder.all_runtime_packages())
        assert row["description"] == builder.description


def test_ops_table_names_every_op() -> None:
    result = runner.invoke(app, ["ops"])
    assert result.exit_code == 0
    for name in ALL_OPS:
        assert name in result.stdout


def test_dockerfile_to_stdout_is_the_rendered_text() -> None:
    result = runner.invoke(app, ["dockerfile", "--cpu", "--ops", "cpu_adam", "--no-buildkit"])
    assert result.exit_code == 0, result.output
    expected = render(build_spec(SpecInput(cpu=True, ops="cpu_adam", buildkit=False)))
    assert result.stdout == expected


def test_dockerfile_output_file_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "Dockerfile"
    target.parent.mkdir()  # -o does not create folders: a missing one is a typo more often than not
    result = runner.invoke(app, ["dockerfile", "--cuda", "12.4", "--ops", "quantizer", "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert target.read_text() == render(build_spec(SpecInput(cuda="12.4", ops="quantizer")))
    assert [p.name for p in target.parent.iterdir()] == ["Dockerfile"]  # no temp file left


def test_atomic_write_leaves_the_old_file_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text("old\n")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(errors.BadInputError, match="disk full"):
        files.write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["Dockerfile"]


def test_warnings_go_to_stderr_and_the_dockerfile_to_stdout() -> None:
    result = runner.invoke(app, ["dockerfile", "--cuda", "12.1", "--ops", "all", "--arch", "7.5"])
    assert result.exit_code == 0
    assert "warning:" in result.stderr and "fp_quantizer" in result.stderr
    assert result.stdout.startswith("# imagegen ops image: cuda12.1")


def test_debug_env_shows_the_traceback() -> None:
    # Two targets at once: a plain BadInputError (an unknown op would be its subclass UnknownOpError).
    args = ["dockerfile", "--cpu", "--cuda", "12.1", "--ops", "cpu_adam"]
    quiet = runner.invoke(app, args, env={"IMAGEGEN_DEBUG": ""})
    loud = runner.invoke(app, args, env={"IMAGEGEN_DEBUG": "1"})
    assert quiet.exit_code == loud.exit_code == 2
    assert "Traceback" not in quiet.stderr
    assert "Traceback" in loud.stderr and "BadInputError" in loud.stderr


def test_build_rejects_bad_input_before_touching_an_engine(tmp_path: Path) -> None:
    result = runner.invoke(app, ["build", "--cpu", "--ops", "cpu_adam", "--source", str(tmp_path)])
    assert result.exit_code == 2
    assert "the project's sources are not at" in result.stderr and "setup.py" in result.stderr


def test_exit_codes_belong_to_the_error_classes() -> None:
    assert errors.BadInputError("m").exit_code == 2
    assert errors.BuildFailedError("m").exit_code == 1
    assert errors.VerificationFailedError("m").exit_code == 1
    assert errors.EngineUnavailableError("m").exit_code == 3
    assert errors.EngineUnavailableError("m", "h").to_json() == {
        "error": {"message": "m", "hint": "h", "exit_code": 3}
    }


def test_staged_context_holds_only_the_wheel_inputs_and_the_extras(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    (wheels / "notes.txt").write_text("not a wheel")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    spec = build_spec(
        SpecInput(cpu=True, ops="all", wheelhouse=str(wheels), ca_cert=str(ca), stable_headers="own")
    )
    with staged_context(spec, REPO) as context:
        top = sorted(p.name for p in context.iterdir())
        assert top == sorted(
            ["README.md", "_imagegen", "imagegen", "kernels", "op_builder", "pyproject.toml", "setup.py"]
        )
        # Of imagegen, only the script that splits the venv into the runtime's layers.
        files = [str(p.relative_to(context)) for p in (context / "imagegen").rglob("*") if p.is_file()]
        assert files == ["imagegen/render/split_layers.py"]
        assert (context / "_imagegen" / "ca.crt").read_text() == "-----BEGIN CERTIFICATE-----\n"
        assert [p.name for p in (context / "_imagegen" / "wheelhouse").iterdir()] == [
            "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
        ]
        assert not list(context.rglob("__pycache__")) and not list(context.rglob("*.so"))
        kept = context
    assert not kept.exists()  # removed afterwards


def test_log_lines_are_plain_when_not_a_tty(capsys: pytest.CaptureFixture[str]) -> None:
    with log.step("compile"):
        log.info("one [bold]line[/bold]")
        log.warn("careful")
    with pytest.raises(RuntimeError), log.step("broken"):
        raise RuntimeError("x")
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == "==> compile"
    assert lines[1] == "  one [bold]line[/bold]"  # no markup interpretation, no ANSI codes
    assert lines[2] == "warning: careful"
    assert lines[3].startswith("<== compile: done in ")
    assert lines[4] == "==> broken" and lines[5].startswith("<== broken: failed after ")
    assert "\x1b[" not in captured.err
