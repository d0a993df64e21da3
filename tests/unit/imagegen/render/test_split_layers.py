"""The build stage's split of the venv into the runtime's layers (imagegen/render/split_layers.py),
run as the Dockerfile runs it, on a venv laid out by hand: what the devel stage left goes to the
dependencies, the rest to ours; every entry at one time; bytecode hash-based and reproducible."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagegen.render.dockerfile import SPLIT_SCRIPT

REPO = Path(__file__).resolve().parents[4]
SITE = "lib/python3.11/site-packages"


def _write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _venv(root: Path) -> tuple[Path, Path]:
    venv = root / "opt" / "venv"
    site = venv / SITE
    _write(venv / "pyvenv.cfg", "home = /usr/bin\n")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3.11")
    _write(venv / "bin" / "torchrun")
    _write(site / "torch" / "__init__.py", "X = {'a', 'b', 'c'}\n")
    _write(site / "torch-2.13.0.dist-info" / "RECORD", "torch/__init__.py,,\n../../../bin/torchrun,,\n")
    _write(site / "six.py", "Y = 1\n")
    _write(site / "six-1.16.0.dist-info" / "RECORD", "six.py,,\n")
    # What the build adds: our wheel (a package, a top-level module, a script), a .pth.
    _write(site / "kernels" / "__init__.py", "Z = frozenset({'p', 'q'})\n")
    _write(site / "kernels" / "_ops" / "cpu_lion.abi3.so", "ELF stable")
    _write(site / "kernels" / "_ops" / "async_io.cpython-311-x86_64-linux-gnu.so", "ELF")
    _write(site / "ourmod.py", "W = 2\n")
    info = site / "imagegen-0.1.0.dist-info"
    _write(info / "direct_url.json", '{"url": "file:///wheels/imagegen-0.1.0-py3-none-any.whl"}\n')
    record = ("kernels/__init__.py", "ourmod.py", "../../../bin/ourtool", f"{info.name}/direct_url.json",
              f"{info.name}/RECORD")  # fmt: skip
    _write(info / "RECORD", "".join(f"{name},,\n" for name in record))
    _write(venv / "bin" / "ourtool")
    _write(site / "imagegen-op-sources.pth", "/opt/op-sources\n")
    # Bytecode the build's import wrote, timestamp-based.
    for module in (
        site / "torch" / "__init__.py",
        site / "six.py",
        site / "kernels" / "__init__.py",
        site / "ourmod.py",
    ):
        subprocess.run([sys.executable, "-m", "py_compile", str(module)], check=True)
    _write(site / "torch" / "__pycache__" / "gone.cpython-311.pyc", "stale")
    return venv, site


def _split(
    root: Path, venv: Path, site: Path, seed: str = "0", epoch: str = "1700000000"
) -> subprocess.CompletedProcess[str]:
    deps = root / "devel-site"
    deps.write_text("torch\ntorch-2.13.0.dist-info\nsix.py\nsix-1.16.0.dist-info\n__pycache__\n")
    env = {**os.environ, "PYTHONHASHSEED": seed}
    extra = root / "opt" / "op-sources"
    _write(extra / "acme" / "__init__.py")
    command = [
        str(REPO / SPLIT_SCRIPT),
        str(venv),
        str(site),
        str(root / "layers"),
        str(deps),
        epoch,
        str(extra),
    ]
    return subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, timeout=120)


def _tree(root: Path) -> dict[str, bytes]:
    """Each entry of the layers made under ``root``, by its path below ``root``, and its bytes."""
    found = {}
    for layer in ("deps", "modules", "ours"):
        below = root / "layers" / layer / root.relative_to("/")
        for path in sorted(below.rglob("*")):
            data = (
                os.readlink(path).encode()
                if path.is_symlink()
                else path.read_bytes()
                if path.is_file()
                else b"/"
            )
            found[f"{layer}/{path.relative_to(below)}"] = data
    return found


def test_the_venv_splits_into_the_dependencies_and_ours(tmp_path: Path) -> None:
    venv, site = _venv(tmp_path)
    done = _split(tmp_path, venv, site)
    assert done.returncode == 0, done.stderr
    # Each entry keeps its absolute path under its layer's folder (the runtime copies it to /).
    deps = tmp_path / "layers" / "deps" / venv.relative_to("/")
    ours = tmp_path / "layers" / "ours" / venv.relative_to("/")
    assert not venv.exists()
    assert sorted(os.listdir(deps / SITE)) == ["__pycache__", "six-1.16.0.dist-info", "six.py", "torch",
                                               "torch-2.13.0.dist-info"]  # fmt: skip
    assert sorted(os.listdir(ours / SITE)) == ["__pycache__", "imagegen-0.1.0.dist-info",
                                               "imagegen-op-sources.pth", "kernels", "ourmod.py"]  # fmt: skip
    assert sorted(os.listdir(deps / "bin")) == ["python", "torchrun"] and os.listdir(ours / "bin") == [
        "ourtool"
    ]
    assert (deps / "pyvenv.cfg").is_file() and os.readlink(deps / "bin" / "python") == "/usr/bin/python3.11"
    # A top-level module's bytecode goes with it; the rest of the shared __pycache__ stays.
    assert [p.name.split(".")[0] for p in (ours / SITE / "__pycache__").iterdir()] == ["ourmod"]
    assert [p.name.split(".")[0] for p in (deps / SITE / "__pycache__").iterdir()] == ["six"]
    extra = tmp_path / "layers" / "ours" / tmp_path.relative_to("/") / "opt" / "op-sources"
    assert (extra / "acme" / "__init__.py").is_file()
    # The wheel's file and hash are not kept; RECORD no longer names them.
    info = ours / SITE / "imagegen-0.1.0.dist-info"
    assert not (info / "direct_url.json").exists() and "direct_url" not in (info / "RECORD").read_text()
    assert not (deps / SITE / "torch" / "__pycache__" / "gone.cpython-311.pyc").exists()
    # The module built for torch's stable ABI is a layer of its own; the per-torch one stays ours.
    modules = tmp_path / "layers" / "modules" / venv.relative_to("/")
    assert [str(p.relative_to(modules)) for p in modules.rglob("*") if p.is_file()] == [
        f"{SITE}/kernels/_ops/cpu_lion.abi3.so"
    ]
    assert sorted(os.listdir(ours / SITE / "kernels" / "_ops")) == [
        "async_io.cpython-311-x86_64-linux-gnu.so"
    ]


def test_every_entry_has_one_time_and_bytecode_is_hash_based(tmp_path: Path) -> None:
    venv, site = _venv(tmp_path)
    assert _split(tmp_path, venv, site).returncode == 0
    layers = tmp_path / "layers"
    times = {os.lstat(p).st_mtime for p in layers.rglob("*")}
    assert times == {1700000000}
    for pyc in layers.rglob("*.pyc"):
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        assert flags == 0b11, pyc  # hash-based, checked (PEP 552)


def test_the_same_venv_made_again_later_gives_the_same_bytes(tmp_path: Path) -> None:
    # Made twice at the same place (the image's paths are fixed), a second apart: the sources'
    # times and the timestamp-based bytecode differ, the layers must not.
    trees = []
    for _ in range(2):
        shutil.rmtree(tmp_path / "root", ignore_errors=True)
        root = tmp_path / "root"
        venv, site = _venv(root)
        assert _split(root, venv, site).returncode == 0
        trees.append(_tree(root))
        time.sleep(1.1)
    assert trees[0] == trees[1]
    # The script refuses a seed that would make set constants' order differ between builds.
    venv, site = _venv(tmp_path / "seeded")
    refused = _split(tmp_path / "seeded", venv, site, seed="random")
    assert refused.returncode != 0 and "PYTHONHASHSEED=0" in refused.stderr


@pytest.mark.parametrize("epoch", ["", "0"])
def test_without_a_source_date_every_time_is_zero(tmp_path: Path, epoch: str) -> None:
    venv, site = _venv(tmp_path)
    assert _split(tmp_path, venv, site, epoch=epoch).returncode == 0
    assert {os.lstat(p).st_mtime for p in (tmp_path / "layers").rglob("*")} == {0}
