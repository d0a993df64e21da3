"""``imagegen catalog``: every target, its torch range and bases, and its proof from the results."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.commands.catalog import catalog_entries, render_table
from imagegen.compat import results
from imagegen.imagespec import catalog

runner = CliRunner()


def _targets() -> dict[str, dict[str, Any]]:
    result = runner.invoke(app, ["catalog", "--json"])
    assert result.exit_code == 0, result.output
    return {t["name"]: t for t in json.loads(result.stdout)["targets"]}


def test_json_lists_every_target_with_the_keys_scripts_read() -> None:
    targets = _targets()
    every = [*catalog.CUDA_TARGETS.values(), *catalog.ROCM_TARGETS.values(), catalog.CPU_TARGET]
    assert list(targets) == [t.name for t in every]
    for entry in targets.values():
        for key in (
            "name",
            "accelerator",
            "version",
            "torch",
            "default_torch",
            "platforms",
            "archs",
            "proof",
        ):
            assert key in entry
        assert entry["default_torch"] in entry["torch"]
        assert {"compiled", "built", "verified"} <= set(entry["proof"])
        assert isinstance(entry["proof"]["built"], bool) and isinstance(entry["proof"]["verified"], bool)


def test_json_has_rocm_7_and_the_corrected_cuda_ranges() -> None:
    targets = _targets()
    assert targets["rocm7.0"]["torch"] == ["2.10.0"]
    assert targets["rocm7.2"]["torch"][0] == "2.11.0"
    assert targets["rocm7.1"]["bases"]["devel"] == "rocm/dev-ubuntu-24.04:7.1"
    assert "2.11.0" in targets["cuda12.6"]["torch"]
    assert targets["cuda13.2"]["torch"][0] == "2.12.0"
    assert targets["cuda12.4"] == {**targets["cuda12.4"], "accelerator": "cuda", "version": "12.4"}
    assert targets["cpu"]["archs"] == [] and targets["cuda12.4"]["archs"][-1].endswith("+PTX")


def test_proof_is_what_the_results_file_says() -> None:
    data = results.load()
    for entry in catalog_entries(data):
        target = catalog.lookup(entry["accelerator"], entry["version"])
        assert target is not None
        assert entry["proof"] == results.proof(target, data)
        assert set(entry["proof"]["compiled"]) <= set(entry["torch_minors"])


def test_proof_follows_the_results_it_is_given() -> None:
    # Nothing recorded: nothing proven, every target only rendered.
    for entry in catalog_entries({"schema": 1}):
        assert (
            entry["proof"]["compiled"] == []
            and not entry["proof"]["built"]
            and not entry["proof"]["verified"]
        )
        assert entry["proof"]["not_compiled"] == entry["torch_minors"]


def test_text_output_is_a_table_with_every_target() -> None:
    result = runner.invoke(app, ["catalog"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    for name in ("cuda12.4", "rocm7.2", "cpu"):
        assert name in result.stdout
    assert "make compat" in result.stdout


def test_a_torch_release_the_catalog_does_not_admit_exits_2_naming_the_ones_it_does() -> None:
    result = runner.invoke(app, ["dockerfile", "--rocm", "7.0", "--torch", "2.11", "--ops", "quantizer"])
    assert result.exit_code == 2
    assert "2.10.0" in result.output and "rocm7.0" in result.output
    assert "Traceback" not in result.output


def _printed(width: int) -> tuple[list[str], str]:
    table = render_table(catalog_entries(), width)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return [str(c.header) for c in table.columns], out.getvalue()


def test_a_narrow_terminal_drops_bases_and_archs_and_cuts_no_cell() -> None:
    headers, text = _printed(80)
    assert "bases (devel / runtime)" not in headers and "archs" not in headers
    assert {"target", "torch", "compiled", "built", "verified"} <= set(headers)
    assert "…" not in text  # nothing cut: every target name and verdict whole
    for name in (t["name"] for t in catalog_entries()):
        assert name in text


def test_a_wide_terminal_shows_every_column() -> None:
    headers, text = _printed(250)
    assert "bases (devel / runtime)" in headers and "archs" in headers
    assert "nvidia/cuda:12.4.1-devel-ubuntu22.04" in text
