"""DS_STABLE_HEADERS: the stable ops compile against one folder of torch headers, whatever torch is
installed, so every torch release of a target builds the same module."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from op_builder import get_builder, stable_abi
from op_builder.context import resolve_context
from op_builder.errors import BadInputError
from op_builder.toolchain import TorchBuild
from tests.unit.fakes import host


def headers(root: Path, version: str) -> Path:
    """An include folder as torch ships one: enough of it to be recognised."""
    major, minor, patch = version.split(".")
    include = root / version / "include"
    (include / "torch" / "headeronly").mkdir(parents=True)
    (include / "torch" / "headeronly" / "version.h").write_text(
        f"#pragma once\n#define TORCH_VERSION_MAJOR {major}\n"
        f"#define TORCH_VERSION_MINOR {minor}\n#define TORCH_VERSION_PATCH {patch}\n"
    )
    return include


def context(env: dict[str, str], torch: str = "2.11.0"):  # type: ignore[no-untyped-def]
    toolchain = replace(host(), torch=TorchBuild(torch, None, None))
    return resolve_context({"DS_ACCELERATOR": "cpu", **env}, toolchain)


def test_the_headers_release_is_read_from_their_version_header(tmp_path: Path) -> None:
    pinned = stable_abi.pinned_headers(str(headers(tmp_path, "2.15.0")), "DS_STABLE_HEADERS")
    assert pinned.version == "2.15.0"
    assert pinned.include == (tmp_path / "2.15.0" / "include").resolve()


def test_a_folder_without_torch_headers_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"DS_STABLE_HEADERS=.* holds no torch headers") as caught:
        context({"DS_STABLE_HEADERS": str(tmp_path)})
    assert caught.value.hint is not None and "unset" in caught.value.hint


def test_headers_older_than_the_stable_api_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"torch 2\.9\.1's headers; the stable ops need 2\.10"):
        context({"DS_STABLE_HEADERS": str(headers(tmp_path, "2.9.1"))})


def test_a_stable_op_compiles_against_the_pinned_headers_as_the_installed_torchs_would_be_named(
    tmp_path: Path,
) -> None:
    include = headers(tmp_path, "2.15.0")
    flags = get_builder("cpu_lion").flags(context({"DS_STABLE_HEADERS": str(include)}))
    assert flags.stable_abi == "2.10"
    assert flags.torch_headers == str(include.resolve())
    assert flags.compile_include_dirs[-1] == str(include.resolve())  # after the op's own, before torch's
    assert flags.torch_headers not in flags.include_dirs  # not scanned as the op's own headers
    assert f"-ffile-prefix-map={include.resolve()}/=torch/include/" in flags.cxx
    # The standard the pinned headers need (2.14 and later: C++20), not the installed 2.11's.
    assert [f for f in flags.cxx if f.startswith("-std=")] == ["-std=c++20"]
    assert flags.libraries[0] == "stdc++"
    assert any(f.startswith("-Wl,--version-script=") for f in flags.ldflags)


def test_the_namespace_follows_the_headers_not_the_installed_torch(tmp_path: Path) -> None:
    include = str(headers(tmp_path, "2.15.0"))
    lion = get_builder("cpu_lion")

    def namespace(env: dict[str, str], torch: str) -> str:
        cxx = lion.flags(context(env, torch)).cxx
        return next(f for f in cxx if f.startswith("-DIMAGEGEN_OP_NAMESPACE="))

    pinned = {"DS_STABLE_HEADERS": include}
    assert namespace(pinned, "2.10.0") == namespace(pinned, "2.13.0")
    assert namespace({}, "2.10.0") != namespace({}, "2.13.0")  # each its own torch's headers
    other = {"DS_STABLE_HEADERS": str(headers(tmp_path / "b", "2.14.1"))}
    assert namespace(other, "2.10.0") != namespace(pinned, "2.10.0")


def test_a_per_torch_build_ignores_the_pinned_headers(tmp_path: Path) -> None:
    include = str(headers(tmp_path, "2.15.0"))
    old = get_builder("cpu_lion").flags(context({"DS_STABLE_HEADERS": include}, torch="2.9.1"))
    assert old.stable_abi is None and old.torch_headers is None
    # An op whose builder declares no stable target (an op package's, say), on this torch
    lion_class = type(get_builder("cpu_lion"))
    per_torch = type("PerTorchLion", (lion_class,), {"name": "per_torch_lion", "stable_abi": None})()
    flags = per_torch.flags(context({"DS_STABLE_HEADERS": include}))
    assert flags.stable_abi is None and flags.torch_headers is None and "stdc++" not in flags.libraries
