"""Credentials in the URLs a user gives (``--compile-cache``, ``--torch-index``, and their
``IMAGEGEN_*`` variables) are never printed, rendered into a Dockerfile or sealed into the proof.

Each bad URL below carries the password ``hunter2``; wherever imagegen shows the URL, its
userinfo is ``***``, parsed or not. A torch index that takes credentials gets them as the BuildKit
secret ``torch-index``; the classic builder, which has no secrets, refuses one (exit 2).
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.building.build_secrets import build_secrets
from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec import compile_cache
from imagegen.imagespec.inputs import TORCH_INDEX_SECRET_ID, index_url
from imagegen.imagespec.spec import SpecInput, build_spec, spec_input
from imagegen.oci.push_plan import check_push_registry
from imagegen.proof.seal import spec_parameters
from imagegen.render.dockerfile import render
from imagegen.render.matrix import bake_file
from imagegen.runs.bake import _staged
from imagegen.runs.bake_inputs import BakeRequest
from imagegen.urls import has_userinfo, redact
from tests.unit.contract import DOCKERFILE, assert_reported
from tests.unit.imagegen.render.test_imagegen_render import stages

REPO = Path(__file__).resolve().parents[3]
PASSWORD = "hunter2"
INDEX = f"https://alice:{PASSWORD}@index.example.com/simple"


def _shown(exc: BadInputError) -> str:
    return f"{exc.message}\n{exc.hint or ''}"


def _invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200", **(env or {})})
    assert_reported(result)
    return result.exit_code, result.stdout + result.stderr


# ------------------------------------------------------------------ redaction, parsed or not


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("https://alice:hunter2@host/simple", "https://***@host/simple"),
        ("redis://:hunter2@[::1:6379", "redis://***@[::1:6379"),
        ("https://alice:hun/ter2@host/simple", "https://***@host/simple"),  # '/' in the password
        ("https://alice:hun@ter2@host", "https://***@host"),  # an unencoded '@' in it too
        ("alice:hunter2@host:6379", "***@host:6379"),  # no scheme
        ("https://host/simple", "https://host/simple"),
        ("local", "local"),
    ],
)
def test_redact_hides_everything_between_the_scheme_and_the_last_at(value: str, shown: str) -> None:
    assert redact(value) == shown
    assert has_userinfo(value) is (shown != value)


# ------------------------------------------------------------------ --compile-cache

COMPILE_CACHES = [
    pytest.param("redis://alice:hunter2@cache:99999", "credentials", id="port-out-of-range"),
    pytest.param("redis://alice:hunter2@cache:63x9", "credentials", id="port-not-a-number"),
    pytest.param("redis://alice:hun/ter2@cache:6379", "credentials", id="slash-in-password"),
    pytest.param("http://alice:hunter2@cache:6379", "credentials", id="unsupported-scheme"),
    pytest.param("memcached://alice:hunter2@cache", "credentials", id="another-unsupported-scheme"),
    pytest.param("redis://alice:hunter2@[::1:6379", "credentials", id="broken-ipv6"),
    pytest.param("alice:hunter2@cache:6379", "not a cache", id="no-scheme"),
]


@pytest.mark.parametrize(("value", "fragment"), COMPILE_CACHES)
def test_a_bad_compile_cache_url_is_shown_without_its_password(value: str, fragment: str) -> None:
    with pytest.raises(BadInputError, match=fragment) as caught:
        compile_cache.parse(value)
    assert PASSWORD not in _shown(caught.value) and "ter2" not in _shown(caught.value)
    assert "***@" in caught.value.message


@pytest.mark.parametrize(
    "value", ["redis://cache:99999", "redis://cache:63x9", "redis://[::1:6379", "http://cache:6379"]
)
def test_a_bad_compile_cache_url_without_credentials_is_still_named(value: str) -> None:
    with pytest.raises(BadInputError) as caught:
        compile_cache.parse(value)
    assert value in caught.value.message


@pytest.mark.parametrize(("value", "fragment"), COMPILE_CACHES)
def test_imagegen_compile_cache_from_the_environment_is_redacted_too(value: str, fragment: str) -> None:
    with pytest.raises(BadInputError, match=fragment) as caught:
        build_spec(spec_input({"IMAGEGEN_COMPILE_CACHE": value}, cpu=True, ops="cpu_adam"))
    assert PASSWORD not in _shown(caught.value) and "ter2" not in _shown(caught.value)


def test_the_cli_prints_no_compile_cache_password_flag_or_variable() -> None:
    bad = "redis://alice:hunter2@[::1:6379"
    for args, env in ((["--compile-cache", bad], {}), ([], {"IMAGEGEN_COMPILE_CACHE": bad})):
        _, output = _invoke([*DOCKERFILE, *args], env)
        assert PASSWORD not in output and "redis://***@" in output


# ------------------------------------------------------------------ --torch-index, bad


TORCH_INDEXES = [
    pytest.param(f"https://alice:{PASSWORD}@index.example.com:99999/simple", "port", id="port-out-of-range"),
    pytest.param(f"https://alice:{PASSWORD}@index.example.com:44x3/simple", "port", id="port-not-a-number"),
    pytest.param(f"ftp://alice:{PASSWORD}@index.example.com/simple", "scheme 'ftp'", id="unsupported-scheme"),
    pytest.param(f"https://alice:{PASSWORD}@[::1/simple", "IPv6", id="broken-ipv6"),
    pytest.param(f"https://alice:{PASSWORD}@index example.com/simple", "characters", id="a-space"),
    pytest.param(f"https://alice:hun/{PASSWORD}@index.example.com/simple", "percent-encode", id="slash"),
    pytest.param(f"https://alice:12/{PASSWORD}@index.example.com/simple", "percent-encode", id="slash-port"),
    pytest.param(f"file://alice:{PASSWORD}@/srv/index", "no user or password", id="file"),
]


@pytest.mark.parametrize(("value", "fragment"), TORCH_INDEXES)
def test_a_bad_torch_index_is_shown_without_its_password(value: str, fragment: str) -> None:
    with pytest.raises(BadInputError) as caught:
        index_url(value)
    assert fragment in _shown(caught.value)
    assert PASSWORD not in _shown(caught.value) and "***@" in caught.value.message


@pytest.mark.parametrize(("value", "fragment"), TORCH_INDEXES)
def test_imagegen_torch_index_from_the_environment_is_redacted_too(value: str, fragment: str) -> None:
    _, output = _invoke(DOCKERFILE, {"IMAGEGEN_TORCH_INDEX": value})
    assert PASSWORD not in output and "***@" in output


# ------------------------------------------------------------------ --torch-index with credentials


def test_the_spec_and_its_proof_name_the_index_without_its_credentials() -> None:
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX))
    assert spec.torch_index == "https://***@index.example.com/simple"
    assert spec.torch_index_secret is not None and spec.torch_index_secret.value == INDEX
    assert PASSWORD not in repr(spec) and PASSWORD not in str(spec.torch_index_secret)
    assert PASSWORD not in repr(spec_parameters(spec))
    # What the image is does not depend on the password: the same tag, an equal spec.
    other = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX.replace(PASSWORD, "x")))
    assert other.tag == spec.tag and other == spec


def test_a_warning_about_the_index_names_it_without_its_credentials() -> None:
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch="2.99.0", torch_index=INDEX))
    assert spec.warnings and all(PASSWORD not in w for w in spec.warnings)
    assert any("https://***@index.example.com/simple" in w for w in spec.warnings)


def test_the_dockerfile_reads_a_credentialed_index_from_the_build_secret() -> None:
    text = render(build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX)))
    assert PASSWORD not in text and "alice" not in text
    devel = stages(text)["devel"]
    assert f"--mount=type=secret,id={TORCH_INDEX_SECRET_ID}" in devel
    assert f'PIP_INDEX_URL="$(cat /run/secrets/{TORCH_INDEX_SECRET_ID})" pip install' in devel
    assert "--index-url" not in devel  # it would win over PIP_INDEX_URL
    # Never where the image's history or later stages keep it.
    assert not any(line.startswith(("ARG", "ENV")) and "PIP_INDEX_URL" in line for line in text.splitlines())
    assert "secret" not in stages(text)["runtime"]


def test_the_step_names_the_index_redacted_as_one_shell_word() -> None:
    """Its text (the layer's cache key) changes with the index, never with the password, and no
    character of the URL is run by the shell."""
    url = f"https://alice:{PASSWORD}@index.example.com:8443/a;b/simple?x=1&y=$(id)"
    devel = stages(render(build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=url))))["devel"]
    line = next(line for line in devel.splitlines() if "echo " in line and TORCH_INDEX_SECRET_ID in line)
    echo = line.strip().split("; exit 1")[0].removeprefix("echo ")
    done = subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + echo], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[1] == "https://***@index.example.com:8443/a;b/simple?x=1&y=$(id)"


def test_an_index_without_credentials_is_rendered_as_before() -> None:
    text = render(build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index="https://h.example/simple")))
    assert "--index-url https://h.example/simple" in text and "secret,id=torch-index" not in text


def test_the_cli_writes_no_password_into_the_dockerfile() -> None:
    for args, env in ((["--torch-index", INDEX], {}), ([], {"IMAGEGEN_TORCH_INDEX": INDEX})):
        result = CliRunner().invoke(app, [*DOCKERFILE, *args], env={"IMAGEGEN_DEBUG": "", **env})
        assert result.exit_code == 0, result.stdout + result.stderr
        assert PASSWORD not in result.stdout + result.stderr
        assert "https://***@index.example.com/simple" in result.stdout


def test_the_classic_builder_refuses_an_index_with_credentials() -> None:
    for args, env in (
        (["--torch-index", INDEX, "--no-buildkit"], {}),
        (["--no-buildkit"], {"IMAGEGEN_TORCH_INDEX": INDEX}),
        (["--torch-index", INDEX], {"IMAGEGEN_BUILDKIT": "0"}),
    ):
        _, output = _invoke([*DOCKERFILE, *args], env)
        assert "BuildKit" in output and PASSWORD not in output


def test_a_spec_switched_to_the_classic_builder_does_not_render() -> None:
    """``imagegen build`` falls back to the classic variant where the engine has no BuildKit."""
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX))
    with pytest.raises(BadInputError, match="BuildKit") as caught:
        render(replace(spec, buildkit=False))
    assert PASSWORD not in _shown(caught.value)


def test_offline_drops_the_index_and_its_secret(tmp_path: Path) -> None:
    spec = build_spec(
        SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX, wheelhouse=str(tmp_path), offline=True)
    )
    assert spec.torch_index is None and spec.torch_index_secret is None


def test_the_build_secret_holds_the_whole_url_privately_while_the_build_lasts() -> None:
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX))
    with build_secrets(spec, {}) as secrets:
        path = secrets[TORCH_INDEX_SECRET_ID]
        assert path.read_text() == INDEX  # whole, no newline: the step reads it as PIP_INDEX_URL
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not path.exists()
    plain = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index="https://h.example/simple"))
    with build_secrets(plain, {}) as secrets:
        assert secrets == {}


def test_a_bake_passes_the_index_as_a_secret_and_its_file_names_no_password() -> None:
    spec = build_spec(SpecInput(cpu=True, ops="cpu_adam", torch_index=INDEX))
    with _staged([BakeRequest("cpu", spec)], REPO, {}, {}) as targets:
        (target,) = targets
        secrets = dict(target.secrets)
        assert Path(secrets[TORCH_INDEX_SECRET_ID]).read_text() == INDEX
        text = bake_file(targets) + Path(target.dockerfile).read_text()
        assert PASSWORD not in text and f"id={TORCH_INDEX_SECRET_ID},src=" in text


# ------------------------------------------------------------------ registries and image names


@pytest.mark.parametrize(
    "registry",
    [
        "https://alice:hunter2@registry.example",
        "alice:hunter2@registry.example:5000/ml",
        "a:hun@ter2@r.example",
    ],
)
def test_a_push_registry_with_credentials_is_refused_without_showing_them(registry: str) -> None:
    with pytest.raises(BadInputError) as caught:
        check_push_registry(registry, ["imagegen:cpu"])
    assert PASSWORD not in _shown(caught.value) and "ter2" not in _shown(caught.value)
    assert "***@" in caught.value.message


@pytest.mark.parametrize("field", ["tag", "base_devel", "base_runtime"])
def test_an_image_given_as_a_url_with_credentials_is_shown_without_them(field: str) -> None:
    url = f"https://alice:{PASSWORD}@registry.example/ml/ops:1"
    with pytest.raises(BadInputError, match="is a URL") as caught:
        build_spec(SpecInput(cpu=True, ops="cpu_adam", **{field: url}))
    assert (
        PASSWORD not in _shown(caught.value)
        and "https://***@registry.example/ml/ops:1" in caught.value.message
    )


def test_verify_names_an_image_url_without_its_password() -> None:
    _, output = _invoke(["verify", f"https://alice:{PASSWORD}@registry.example/ml/ops:1"])
    assert PASSWORD not in output and "***@" in output
