"""An image's size by part: the size parsing, the probe's walk of a real folder tree, the
attribution from a listing, the advice, and --max-size through `imagegen build` (engine answered
by hand, as in test_pipeline)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.oci.push_plan import PushPlan
from imagegen.proof.size import KINDS, OverBudgetError, attribute, base_bytes_of, check_budget, parse_size
from imagegen.proof.size_probe import Tally, measure, owners, pth_paths
from imagegen.runs import pipeline
from imagegen.runs.run_choices import RunOptions
from tests.unit.imagegen.runs.test_pipeline import REPO, FakeEngine, spec

GiB, MiB = 2**30, 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2GiB", 2 * 1024**3),
        ("1.5GB", 1_500_000_000),
        ("500MiB", 500 * 1024**2),
        ("500mib", 500 * 1024**2),
        ("1048576", 1_048_576),
        (" 10 kB ", 10_000),
        ("2G", 2 * 1024**3),  # as Docker reads --memory 2g
        ("0.5KiB", 512),
        ("1B", 1),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "2 GiBs", "-1", "1e9", "GiB", "0", "0.4B", "2,5GB", "1.GB"])
def test_bad_sizes_are_bad_input(text: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_size(text)
    assert caught.value.exit_code == 2 and "2GiB" in (caught.value.hint or "")


# --------------------------------------------------------------------------- the probe's walk


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def _venv(root: Path) -> tuple[Path, Path]:
    """A venv with two distributions (RECORD), a file no RECORD lists, a hard link, a symlink,
    an empty file, and a .pth naming a folder outside it."""
    prefix = root / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    _write(site / "torch" / "__init__.py", 100)
    _write(site / "torch" / "lib" / "libtorch.so", 5000)
    _write(site / "torch" / "extra_not_in_record.py", 7)  # under torch's top-level name
    _write(site / "functorch" / "__init__.py", 30)
    _write(site / "torch-2.13.0+cpu.dist-info" / "METADATA", 40)
    record = "torch/__init__.py,,\ntorch/lib/libtorch.so,,\nfunctorch/__init__.py,,\n"
    (site / "torch-2.13.0+cpu.dist-info" / "RECORD").write_text(
        record + "torch-2.13.0+cpu.dist-info/RECORD,,\n"
    )
    _write(site / "typing_extensions.py", 200)
    _write(site / "__pycache__" / "typing_extensions.cpython-311.pyc", 150)  # not in its RECORD
    _write(site / "nvidia_cublas-13.0.0.dist-info" / "METADATA", 10)
    (site / "nvidia_cublas-13.0.0.dist-info" / "RECORD").write_text("nvidia/cublas/lib/libcublas.so.13,,\n")
    _write(site / "nvidia" / "cublas" / "lib" / "libcublas.so.13", 9000)
    (site / "typing_extensions-4.16.0.dist-info").mkdir()
    (site / "typing_extensions-4.16.0.dist-info" / "RECORD").write_text("typing_extensions.py,,\n")
    os.link(site / "torch" / "lib" / "libtorch.so", site / "torch" / "lib" / "libtorch_hardlink.so")
    _write(site / "stray.bin", 11)  # no distribution lists it
    (site / "empty.txt").write_bytes(b"")
    (prefix / "lib64").symlink_to("lib")  # a link to a folder: its 3 bytes count, not followed
    _write(prefix / "pyvenv.cfg", 60)
    outside = root / "op-sources"
    _write(outside / "acme_ops" / "builders.py", 80)
    (site / "imagegen-op-sources.pth").write_text(f"{outside}\nimport something\n{prefix}\n")
    return prefix, site


def test_probe_counts_as_the_engine_does_and_finds_owners(tmp_path: Path) -> None:
    prefix, site = _venv(tmp_path)
    doc = measure(str(prefix), str(site), str(site), str(site / "kernels" / "_ops" / "manifest.json"))
    record_sizes = len((site / "torch-2.13.0+cpu.dist-info" / "RECORD").read_bytes())
    # torch: its RECORD's files, the dist-info, and the file under its top-level name; the hard
    # link to libtorch.so is the same inode, counted once.
    assert doc["dists"]["torch"] == 100 + 5000 + 7 + 30 + 40 + record_sizes
    assert doc["dists"]["nvidia-cublas"] == 9000 + 10 + len("nvidia/cublas/lib/libcublas.so.13,,\n")
    assert doc["dists"]["typing-extensions"] == 200 + 150 + len("typing_extensions.py,,\n")
    pth = len((site / "imagegen-op-sources.pth").read_bytes())
    assert doc["unowned"] == 11 + pth
    assert doc["venv"] == 60 + len("lib")
    assert doc["paths"] == {str(tmp_path / "op-sources"): 80}
    assert doc["ops"] == {}


def test_tally_counts_each_inode_once(tmp_path: Path) -> None:
    _write(tmp_path / "a", 10)
    os.link(tmp_path / "a", tmp_path / "b")
    tally = Tally()
    assert [tally.size(str(tmp_path / n)) for n in ("a", "b", "missing")] == [10, 0, 0]
    assert tally.size(str(tmp_path)) == 0  # folders are not counted


def test_owners_leave_a_name_two_distributions_claim(tmp_path: Path) -> None:
    for dist in ("a-1.dist-info", "b-1.dist-info"):
        (tmp_path / dist).mkdir()
    (tmp_path / "a-1.dist-info" / "RECORD").write_text("__pycache__/a.cpython-311.pyc,,\na.py,,\n")
    (tmp_path / "b-1.dist-info" / "RECORD").write_text("__pycache__/b.cpython-311.pyc,,\n")
    _, top = owners(str(tmp_path))
    assert "__pycache__" not in top and top["a.py"] == "a"


def test_pth_paths_skip_the_venv_and_code_lines(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "x").mkdir()
    (tmp_path / "site" / "a.pth").write_text(f"import os\n{tmp_path / 'x'}\n{tmp_path / 'site'}\nrelative\n")
    assert pth_paths(str(tmp_path / "site"), str(tmp_path / "site")) == [str(tmp_path / "x")]


# --------------------------------------------------------------------------- attribution

PROBE: dict[str, Any] = {
    "probe": 1,
    "dists": {"torch": 1000, "nvidia-cublas": 3000, "nvidia-cudnn": 4000, "numpy": 200, "triton": 700},
    "unowned": 5,
    "venv": 6,
    "paths": {"/opt/op-sources": 80},
    "ops": {
        "transformer": {
            "file": "/x/transformer.so",
            "bytes": 900,
            "device": {"sm_90": 300, "compute_90": 100, "sm_80": 350},
        },
        "fused_adam": {"file": "/x/fused_adam.so", "bytes": 400, "device": {"sm_80": 50, "sm_90": 60}},
        "cpu_adam": {"file": "/x/cpu_adam.so", "bytes": 70, "device": {}},
    },
}


def test_attribution_parts_sum_to_the_total() -> None:
    report = attribute("img:1", 20_000, PROBE, "base:1", 500, "13.0")
    parts = {part.name: part for part in report.parts}
    assert [p.kind for p in report.parts] == ["base", "torch", "python", "cuda", "op", "op", "op", "other"]
    assert {p.kind for p in report.parts} <= set(KINDS)
    assert parts["base"].bytes == 500 and parts["base"].image == "base:1"
    assert parts["torch"].bytes == 1000
    assert parts["python packages"].bytes == 200 + 700 + 5 + 6 + 80
    assert next(iter(parts["python packages"].packages)) == "triton"  # largest first
    assert parts["CUDA runtime wheels"].bytes == 7000
    assert parts["CUDA runtime wheels"].packages == {"nvidia-cudnn": 4000, "nvidia-cublas": 3000}
    assert list(parts["transformer"].archs) == ["sm_80", "sm_90", "compute_90"]
    assert parts["other"].bytes == 20_000 - (500 + 1000 + 991 + 7000 + 900 + 400 + 70)
    assert sum(p.bytes for p in report.parts) == report.total_bytes
    data = json.loads(json.dumps(report.to_json()))
    assert data["total_bytes"] == 20_000
    assert {"name", "kind", "bytes"} <= set(data["parts"][0])
    transformer = next(p for p in data["parts"] if p["name"] == "transformer")
    assert transformer["archs"] == {"sm_80": 350, "sm_90": 300, "compute_90": 100}
    assert transformer["host_bytes"] == 150


def test_a_base_not_here_is_in_other_and_said() -> None:
    report = attribute("img:1", 20_000, PROBE, "base:1", None)
    assert "base" not in [p.kind for p in report.parts]
    assert any("base:1 is not here" in note for note in report.notes)
    assert sum(p.bytes for p in report.parts) == 20_000


def test_parts_larger_than_the_total_leave_other_at_zero_and_say_so() -> None:
    report = attribute("img:1", 100, PROBE)
    assert report.parts[-1].bytes == 0 and any("more than the engine's total" in n for n in report.notes)


def test_base_bytes_only_when_its_layers_come_first() -> None:
    assert base_bytes_of(["a", "b", "c"], ["a", "b"], 42) == 42
    assert base_bytes_of(["a", "b", "c"], ["b"], 42) is None
    assert base_bytes_of(["a"], [], 42) is None


def test_advice_where_device_code_dominates() -> None:
    advice = "\n".join(attribute("img:1", 20_000, PROBE, cuda="13.0").advice())
    assert "transformer: device code is 750 B of its 900 B (83%)" in advice
    assert "fused_adam" not in advice  # 110 of 400 bytes: host code dominates
    assert "cpu_adam" not in advice
    assert "fewer archs" in advice and "-compress-mode=size: nvcc 13.0 has it" in advice
    assert "PTX only" not in advice  # one PTX entry already
    two_ptx = {
        **PROBE,
        "ops": {"t": {"bytes": 100, "device": {"sm_80": 40, "compute_80": 20, "compute_90": 20}}},
    }
    advice = "\n".join(attribute("img:1", 20_000, two_ptx, cuda="12.4").advice())
    assert "+PTX on sm_90 alone" in advice and "not in this image's nvcc (12.4)" in advice
    assert attribute("img:1", 20_000, {"ops": {"cpu_adam": {"bytes": 5}}}).advice() == ()


def test_budget() -> None:
    report = attribute("img:1", 20_000, PROBE, "base:1", 500)
    check_budget(report, 20_000)  # at the budget: fine
    with pytest.raises(OverBudgetError) as caught:
        check_budget(report, 19_999)
    assert caught.value.exit_code == 1
    assert "1 B over --max-size" in caught.value.message and "not pushed" in caught.value.message
    assert "CUDA runtime wheels (cuda)" in (caught.value.hint or "")


# --------------------------------------------------------------------------- --max-size


TO_TAG = PushPlan.for_build(push=True, verify=True, tag=None)


def test_over_budget_is_not_ok_and_not_pushed(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    report = pipeline.build(spec(), RunOptions(source=REPO, max_size=100 * MiB, push=TO_TAG))
    assert not report.ok and report.over_budget and not report.pushed
    assert not any(call.startswith("push") for call in engine.calls)
    assert report.verify is not None and report.verify.ok  # verified, but too large
    report = pipeline.build(spec(), RunOptions(source=REPO, max_size=123 * MiB, push=TO_TAG))
    assert report.ok and report.pushed


BUILD = ["build", "--cpu", "--ops", "cpu_adam,cpu_lion", "--tag", "it:1"]


def test_build_max_size_exit_1_with_the_attribution(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine().install(monkeypatch)
    result = CliRunner().invoke(app, [*BUILD, "--max-size", "100MiB", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)  # one document: the summary, with its size by part
    assert data["ok"] is False and data["pushed"] is False and data["max_size_bytes"] == 100 * MiB
    assert data["size"]["total_bytes"] == 123 * MiB
    assert [p["kind"] for p in data["size"]["parts"]] == ["base", "torch", "python", "op", "other"]
    text = CliRunner().invoke(app, [*BUILD, "--max-size", "100MiB"])
    assert text.exit_code == 1
    assert "torch" in text.stdout and "other" in text.stdout  # the attribution table
    assert "over --max-size 100.0 MiB" in text.stderr


def test_build_within_max_size_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeEngine().install(monkeypatch)
    result = CliRunner().invoke(app, [*BUILD, "--max-size", "1GiB", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["size"]["total_bytes"] == 123 * MiB


def test_build_bad_max_size_is_exit_2_before_any_build(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    engine.install(monkeypatch)
    result = CliRunner().invoke(app, [*BUILD, "--max-size", "2 gigs", "--json"])
    assert result.exit_code == 2
    assert "is not a size" in json.loads(result.stdout)["error"]["message"]
    assert engine.calls == []


def test_an_unreadable_module_is_noted_and_still_counted() -> None:
    probe = {
        "ops": {"t": {"bytes": 10, "device": {}, "error": "ValueError: no fatbin container at offset 0x0"}}
    }
    report = attribute("img:1", 100, probe)
    assert report.parts[0].bytes == 10
    assert report.notes == (
        "t: its device code could not be read (ValueError: no fatbin container at offset 0x0)",
    )


def test_size_without_an_engine_is_exit_3(tmp_path: Path) -> None:
    no_daemon = {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}
    result = CliRunner().invoke(app, ["size", "imagegen:cpu-x", "--json"], env=no_daemon)
    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["error"]["exit_code"] == 3


def test_size_of_a_malformed_reference_is_exit_2() -> None:
    result = CliRunner().invoke(app, ["size", "Not//An-Image"])
    assert result.exit_code == 2 and "not a valid image reference" in result.stderr
