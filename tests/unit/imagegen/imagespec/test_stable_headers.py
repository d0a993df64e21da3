"""--stable-headers: which torch's headers an image's stable ops compile against, and what the
Dockerfile and the staged context then hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagegen.building import staging
from imagegen.errors import BadInputError
from imagegen.imagespec import catalog
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec
from imagegen.imagespec.stable_headers import value as stable_headers
from imagegen.render.dockerfile import TORCH_HEADERS_DIR, TORCH_HEADERS_PATH, context_extras, render
from imagegen.runs.torch_headers import pinned_headers
from tests.op_package_files import square_package, unique

NEWEST_CPU = max(catalog.CPU_TARGET.torch_versions(), key=lambda v: tuple(map(int, v.split("."))))


def spec(**flags: object) -> ImageSpec:
    return build_spec(SpecInput(**flags))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, "newest"), ("newest", "newest"), (" OWN ", "own"), ("2.15.0", "2.15.0"), ("2.10.0", "2.10.0")],
)
def test_the_value_is_newest_own_or_a_release(given: str | None, expected: str) -> None:
    assert stable_headers(given) == expected


@pytest.mark.parametrize("given", ["latest", "2.9.1", "2.15", "2.15.0+cpu", "two"])
def test_anything_else_is_refused_with_a_hint(given: str) -> None:
    with pytest.raises(BadInputError, match="--stable-headers") as caught:
        stable_headers(given)
    assert caught.value.hint is not None and "own" in caught.value.hint


def test_an_image_of_an_older_torch_than_the_targets_newest_pins_the_newest() -> None:
    pinned = spec(cpu=True, ops="cpu_adam,cpu_lion", torch="2.10.0")
    assert pinned.stable_headers == NEWEST_CPU
    assert spec(cpu=True, ops="cpu_adam", torch="2.13.0").stable_headers == NEWEST_CPU


def test_an_image_of_the_newest_torch_pins_its_own_release_too() -> None:
    """Pinned, its modules are the bytes the target's older images get; its own headers, read in
    place, would compile other paths into them."""
    assert spec(cpu=True, ops="cpu_adam", torch=NEWEST_CPU).stable_headers == NEWEST_CPU


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"cpu": True, "ops": "cpu_adam", "torch": "2.9.1"}, "torch older than the stable API"),
        ({"cpu": True, "ops": "cpu_adam", "torch": "2.10.0", "stable_headers": "own"}, "asked for its own"),
        ({"rocm": "7.2", "ops": "fused_adam"}, "ROCm"),
    ],
)
def test_no_pin_without_a_stable_module_or_when_it_wants_its_own(flags: dict[str, object], why: str) -> None:
    assert spec(**flags).stable_headers is None, why


def test_no_pin_when_no_op_of_the_image_has_a_stable_build(tmp_path: Path) -> None:
    # An op package whose builder declares no stable target (all of ours do): a module per torch.
    package = square_package(tmp_path, unique("per_torch_ops"), "per_torch_op")
    flags = {"cpu": True, "torch": "2.10.0", "op_sources": (str(package),)}
    assert spec(**flags, ops="per_torch_op").stable_headers is None
    assert spec(**flags, ops="per_torch_op,cpu_adam").stable_headers == NEWEST_CPU  # one stable op is enough


def test_an_arm64_image_pins_the_newest_torch_the_target_has_for_arm64() -> None:
    """The CPU target's arm64 builds end at 2.10.0 (PyPI's aarch64 torch is CUDA from 2.11 on)."""
    assert spec(cpu=True, ops="cpu_adam", torch="2.10.0", platform="linux/arm64").stable_headers == "2.10.0"


def test_a_named_release_is_pinned_even_when_older_than_the_images_torch() -> None:
    assert spec(cpu=True, ops="cpu_lion", torch="2.13.0", stable_headers="2.10.0").stable_headers == "2.10.0"


def test_an_offline_build_keeps_its_own_headers(tmp_path: Path) -> None:
    offline = spec(cpu=True, ops="cpu_lion", torch="2.10.0", wheelhouse=str(tmp_path), offline=True)
    assert offline.stable_headers is None


def test_the_dockerfile_copies_the_pinned_headers_and_points_the_build_at_them() -> None:
    pinned = spec(cpu=True, ops="cpu_lion", torch="2.10.0")
    text = render(pinned)
    build = text[text.index(" AS build") : text.index(" AS runtime")]
    assert f"COPY {TORCH_HEADERS_PATH}/ {TORCH_HEADERS_DIR}/" in build
    assert f"DS_STABLE_HEADERS={TORCH_HEADERS_DIR}" in build
    assert f"{TORCH_HEADERS_PATH}/" in context_extras(pinned)
    own = render(spec(cpu=True, ops="cpu_lion", torch="2.10.0", stable_headers="own"))
    assert "DS_STABLE_HEADERS" not in own and TORCH_HEADERS_PATH not in own


def test_the_staged_context_holds_the_cached_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cache entry as imagegen.compat.headers leaves one: the include folder of that release.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    include = tmp_path / "cache" / "imagegen" / "torch-headers" / "2.12.0" / "include"
    (include / "torch" / "headeronly").mkdir(parents=True)
    (include / "torch" / "headeronly" / "version.h").write_text("#define TORCH_VERSION_MINOR 12\n")
    pinned = spec(cpu=True, ops="cpu_lion", torch="2.10.0", stable_headers="2.12.0")
    found = pinned_headers(pinned)  # from the cache: no index is asked
    assert found == include
    with staging.staged_context(pinned, torch_headers=found) as context:
        staged = context / TORCH_HEADERS_PATH / "torch" / "headeronly" / "version.h"
        assert staged.read_text() == "#define TORCH_VERSION_MINOR 12\n"
    assert pinned_headers(spec(cpu=True, ops="cpu_lion", torch="2.10.0", stable_headers="own")) is None


def test_a_context_without_the_headers_its_spec_pins_is_refused() -> None:
    pinned = spec(cpu=True, ops="cpu_lion", torch="2.10.0")
    with pytest.raises(ValueError, match="pins torch headers"), staging.staged_context(pinned):
        pass
