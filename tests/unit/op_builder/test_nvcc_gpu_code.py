"""op_builder's table of what each nvcc compiles, held to what each nvcc itself says.

tests/fixtures/nvcc/X.Y.txt is ``nvcc --list-gpu-code`` of that CUDA release (the compiler
wheels NVIDIA publishes, or this machine's toolkit; the first line says which). Every 13.x
release imagegen has a target for has one, and a toolkit on this machine is asked directly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagegen.imagespec import catalog
from op_builder import archs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvcc"


def _capabilities(listing: str) -> set[tuple[int, int]]:
    return archs.listed_capabilities(listing)


def _differences(version: str, listing: str) -> dict[str, set[tuple[int, int]]]:
    table = {a.capability for a in archs.supported_archs(version)}
    said = _capabilities(listing)
    return {"only in the table": table - said, "only in nvcc": said - table}


def _fixture(version: str) -> str:
    return (FIXTURES / f"{version}.txt").read_text()


@pytest.mark.parametrize("version", sorted(p.stem for p in FIXTURES.glob("*.txt")))
def test_the_table_is_what_nvcc_lists(version: str) -> None:
    assert _differences(version, _fixture(version)) == {"only in the table": set(), "only in nvcc": set()}


@pytest.mark.parametrize("version", [v for v in catalog.CUDA_TARGETS if v.startswith("13.")])
def test_each_cuda_13_target_has_a_listing_and_its_defaults_are_in_it(version: str) -> None:
    said = _capabilities(_fixture(version))
    for platform in catalog.CUDA_TARGETS[version].platforms:
        for arch in archs.parse_cuda_arch_list(";".join(catalog.default_cuda_archs(version, platform))):
            assert arch.capability in said, (version, platform, str(arch))


def test_a_listing_that_disagrees_is_caught() -> None:
    listing = _fixture("13.5")
    assert _differences("13.5", listing.replace("sm_107\n", ""))["only in the table"] == {(10, 7)}
    assert _differences("13.3", _fixture("13.4"))["only in nvcc"] == {(10, 7)}
    # What `imagegen standins` warns with when a new release's nvcc differs from the table.
    assert archs.table_disagreement("13.5", listing) is None
    assert archs.table_disagreement("13.3", _fixture("13.4")) == "nvcc compiles 10.7 too"
    assert archs.table_disagreement("13.5", listing.replace("sm_75\n", "")) == "nvcc no longer compiles 7.5"
    assert _capabilities("sm_90a\nsm_100f\ncompute_90\nsm_121\n") == {(12, 1)}  # plain sm_ only


def test_the_standin_maker_compares_a_real_nvcc_with_the_table(tmp_path: Path) -> None:
    from imagegen.building.standins import cuda_home

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    home = Path(nvcc).resolve().parent.parent
    version = re.search(
        r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    )
    assert version is not None
    assert cuda_home.arch_table_disagreement(home, version.group(1)) is None
    # The same nvcc read as a release whose table lacks 11.0 (12.9's): the gap is named.
    assert cuda_home.arch_table_disagreement(home, "12.9") is not None
    assert cuda_home.arch_table_disagreement(tmp_path, "13.0") is None  # no nvcc there: nothing to compare


def test_this_machines_nvcc_agrees_with_the_table() -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    version = re.search(
        r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    )
    assert version is not None
    listing = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
    assert _differences(version.group(1), listing) == {"only in the table": set(), "only in nvcc": set()}
