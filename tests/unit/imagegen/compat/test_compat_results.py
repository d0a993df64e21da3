"""The compatibility results: what counts as proven for a target, and the committed file's coverage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagegen.compat import results
from imagegen.imagespec import catalog

ROOT = Path(__file__).resolve().parents[4]
TARGETS = (*catalog.CUDA_TARGETS.values(), *catalog.ROCM_TARGETS.values(), catalog.CPU_TARGET)


def _source(target: str, name: str, ok: bool = True) -> dict[str, Any]:
    return {"op": name, "target": target, "source": f"kernels/csrc/x/{name}.cpp", "ok": ok, "error": ""}


def _host(minors: list[str], failing: dict[str, str] | None = None) -> dict[str, Any]:
    failing = failing or {}
    host: dict[str, Any] = {}
    for minor in minors:
        release = catalog.resolve_torch_release(minor)
        sources = [
            _source("cpu", "cpu_adam", failing.get(minor) != "cpu_adam"),
            _source("gpu", "fused_adam", failing.get(minor) != "fused_adam"),
        ]
        host[minor] = {
            "torch": release,
            "std": "c++20" if minor in ("2.14", "2.15") else "c++17",
            "sources": sources,
        }
    return host


def _device(
    label: str, accelerator: str, version: str, stds: list[str], ok: bool = True
) -> list[dict[str, Any]]:
    return [
        {
            "label": label,
            "accelerator": accelerator,
            "version": version,
            "where": "this machine",
            "std": std,
            "sources": [{"op": "fused_adam", "source": "kernels/csrc/fused_optim/fused_adam.cu", "ok": ok}],
        }
        for std in stds
    ]


ALL_MINORS = [f"2.{n}" for n in range(16)]


def _data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "host": _host(ALL_MINORS),
        "device": [
            *_device("nvcc 13.0", "cuda", "13.0", ["c++17", "c++20"]),
            *_device("hipcc 5.2", "rocm", "5.2", ["c++17"]),
        ],
        "images": [
            {"target": "cpu", "torch": "2.13.0", "date": "2026-11-23", "built": True, "verified": True}
        ],
    }
    data.update(changes)
    return data


def test_everything_compiled_proves_every_admitted_minor() -> None:
    data = _data()
    for target in TARGETS:
        assert results.compiled_minors(target, data) == results.admitted_minors(target), target.name


def test_a_failed_cpu_source_takes_its_minor_out_of_every_target() -> None:
    data = _data(host=_host(ALL_MINORS, failing={"2.4": "cpu_adam"}))
    assert "2.4" not in results.compiled_minors(catalog.CPU_TARGET, data)
    assert "2.4" not in results.compiled_minors(catalog.CUDA_TARGETS["12.4"], data)
    assert "2.5" in results.compiled_minors(catalog.CUDA_TARGETS["12.4"], data)


def test_a_failed_binding_counts_against_gpu_targets_only() -> None:
    data = _data(host=_host(ALL_MINORS, failing={"2.6": "fused_adam"}))
    assert "2.6" in results.compiled_minors(catalog.CPU_TARGET, data)
    assert "2.6" not in results.compiled_minors(catalog.CUDA_TARGETS["12.4"], data)
    assert results.proof(catalog.CUDA_TARGETS["12.4"], data)["not_compiled"] == ["2.6"]


def test_a_minor_never_checked_is_not_proven() -> None:
    data = _data(host=_host([m for m in ALL_MINORS if m != "2.15"]))
    assert "2.15" not in results.compiled_minors(catalog.CPU_TARGET, data)


def test_gpu_targets_need_device_code_compiled_under_their_torch_standard() -> None:
    # nvcc compiled C++17 only: torch 2.14 and 2.15 (C++20) are not proven for CUDA targets.
    data = _data(device=_device("nvcc 13.0", "cuda", "13.0", ["c++17"]))
    compiled = results.compiled_minors(catalog.CUDA_TARGETS["13.0"], data)
    assert "2.13" in compiled and "2.14" not in compiled and "2.15" not in compiled
    # A failed device compile proves nothing for that accelerator.
    failed = _data(device=_device("nvcc 13.0", "cuda", "13.0", ["c++17", "c++20"], ok=False))
    assert results.compiled_minors(catalog.CUDA_TARGETS["13.0"], failed) == []
    assert results.proof(catalog.CUDA_TARGETS["13.0"], failed)["device"] is None
    # No HIP compiler ran: no ROCm target is proven; CUDA ones still are.
    no_hip = _data(device=_device("nvcc 13.0", "cuda", "13.0", ["c++17", "c++20"]))
    assert results.compiled_minors(catalog.ROCM_TARGETS["6.4"], no_hip) == []
    assert results.compiled_minors(catalog.CUDA_TARGETS["12.4"], no_hip) != []


def test_device_proof_prefers_the_targets_own_release_then_the_same_major() -> None:
    data = _data(
        device=[
            *_device("nvcc 12.4", "cuda", "12.4", ["c++17"]),
            *_device("nvcc 13.0", "cuda", "13.0", ["c++17", "c++20"]),
        ]
    )
    own = results.device_proof(catalog.CUDA_TARGETS["12.4"], data)
    assert own is not None and own.toolkit == "nvcc 12.4" and own.exact
    same_major = results.device_proof(catalog.CUDA_TARGETS["12.8"], data)
    assert same_major is not None and same_major.toolkit == "nvcc 12.4" and not same_major.exact
    newer = results.device_proof(catalog.CUDA_TARGETS["13.2"], data)
    assert newer is not None and newer.toolkit == "nvcc 13.0" and not newer.exact
    assert results.device_proof(catalog.CPU_TARGET, data) is None
    hips = _data(
        device=[
            *_device("hipcc 5.2", "rocm", "5.2", ["c++17"]),
            *_device("hipcc 5.7", "rocm", "5.7", ["c++17"]),
        ]
    )
    nearest = results.device_proof(catalog.ROCM_TARGETS["6.1"], hips)
    assert nearest is not None and nearest.toolkit == "hipcc 5.7" and not nearest.exact


def test_built_and_verified_come_from_the_images_section() -> None:
    data = _data()
    assert results.proof(catalog.CPU_TARGET, data)["built"] is True
    assert results.proof(catalog.CUDA_TARGETS["12.4"], data)["built"] is False
    unverified = _data(
        images=[{"target": "cuda12.4", "torch": "2.6.0", "date": "d", "built": True, "verified": False}]
    )
    proof = results.proof(catalog.CUDA_TARGETS["12.4"], unverified)
    assert proof["built"] is True and proof["verified"] is False


def test_markdown_marks_failures_and_missing_toolkits() -> None:
    data = _data(
        host=_host(ALL_MINORS, failing={"2.3": "cpu_adam"}),
        unavailable=[{"accelerator": "rocm", "version": "5.7", "reason": "not available here (trixie)"}],
    )
    text = results.markdown(data)
    assert "**0/1**: `cpu_adam.cpp` failed" in text
    assert "| hipcc 5.7 | not available here (trixie) |" in text
    assert "not: 2.3" in text


# ---------------------------------------------------------------- the committed results


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    data = results.load()
    assert data.get("host"), "imagegen/data/compat.json has no results: run make compat"
    return data


def test_docs_compat_table_is_generated_from_the_results(committed: dict[str, Any]) -> None:
    docs = (ROOT / "docs" / "compat.md").read_text()
    assert docs == results.markdown(committed), "docs/compat.md is stale: run make compat"


def test_no_admitted_combination_failed(committed: dict[str, Any]) -> None:
    # Where a combination does not compile, the code is made to compile or the catalog stops
    # admitting it: no target may admit a torch minor whose check failed.
    failed = {
        t.name: [
            m
            for m in results.admitted_minors(t)
            if any(
                not s["ok"] and (t.accelerator != "cpu" or s["target"] == "cpu")
                for s in committed["host"].get(m, {}).get("sources", [])
            )
        ]
        for t in TARGETS
    }
    assert not {name: m for name, m in failed.items() if m}, f"admitted but failed to compile: {failed}"
    broken = [
        f"{r['label']} {r['std']}"
        for r in committed.get("device", [])
        if not all(s["ok"] for s in r["sources"])
    ]
    assert not broken, f"device code failed: {broken}"


def test_every_admitted_combination_was_compiled(committed: dict[str, Any]) -> None:
    # The catalog promises nothing that was not tried: every (target, torch minor) it admits
    # compiled here, host code and device code (make compat after a catalog change).
    missing = {t.name: results.proof(t, committed)["not_compiled"] for t in TARGETS}
    assert not {name: m for name, m in missing.items() if m}, f"admitted but not compiled: {missing}"


def test_the_results_ship_with_the_package() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"data/*.json"' in pyproject
    assert results.RESULTS_FILE.is_file()


def test_a_run_keeps_the_images_section_edited_while_it_runs(tmp_path: Path) -> None:
    from imagegen.compat.check import Run

    path = tmp_path / "compat.json"
    path.write_text(results.dump({"schema": 1, "images": []}))
    run = Run({"schema": 1, "host": {}, "images": []}, path, say=lambda _: None)
    edited = [{"target": "cuda12.4", "torch": "2.6.0", "date": "2026-11-25", "built": True, "verified": True}]
    path.write_text(results.dump({"schema": 1, "images": edited}))  # by hand, mid-run
    run.data["host"] = {"2.0": {"torch": "2.0.1", "sources": []}}
    run.save()
    saved = results.load(path)
    assert saved["images"] == edited and saved["host"] == run.data["host"]


def test_the_proof_names_the_platforms_an_image_was_built_and_verified_for() -> None:
    target = catalog.CUDA_TARGETS["13.0"]
    data = {
        "images": [
            {"target": "cuda13.0", "platform": "linux/arm64", "built": True, "verified": False},
            {"target": "cuda13.0", "platform": "linux/amd64", "built": True, "verified": True},
            {"target": "cuda13.2", "platform": "linux/arm64", "built": True, "verified": True},
        ]
    }
    proof = results.proof(target, data)
    assert proof["built_platforms"] == ["linux/amd64", "linux/arm64"]
    assert proof["verified_platforms"] == ["linux/amd64"]
    assert results.proof(catalog.CUDA_TARGETS["12.8"], data)["built_platforms"] == []
