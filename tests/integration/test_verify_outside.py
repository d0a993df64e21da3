"""`imagegen verify --key` reads the image from outside it: forgeries that make the image's own
Python answer for it (a `.pth` hook, a `sitecustomize` on `PYTHONPATH`, a package shadowing a
module, a changed Python front, a changed torch file) each fail naming the path, and an image
derived from a signed one that only adds an app folder still verifies, listing what it added.
The two readers of an image's layers (the engine's export, the local layer folders) agree."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from imagegen.engine.layer_dirs import layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, image_layers
from imagegen.proof import outside
from imagegen.proof.image_proof import check_image
from imagegen.proof.signing import load_public_key
from tests.integration.conftest import build_args, imagegen
from tests.integration.derived import derive

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SIGNED = "imagegen-it/outside-signed:cpu_adam-cpu_lion"
OPS = ("cpu_adam", "cpu_lion")
SITE = "/opt/venv/lib/python3.11/site-packages"
PROOF_DIR = "/opt/imagegen/proof"
# What a forger's hook does once it runs: rewrite whatever the verifier prints to "all is well".
HOOK = b"import builtins; builtins.print = lambda *a, **k: None\n"


@pytest.fixture(scope="module")
def signed(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("keys")
    key = ed25519.Ed25519PrivateKey.generate()
    private, public = folder / "key.pem", folder / "pub.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    built = imagegen(*build_args(SIGNED, ops=OPS), "--sign-key", str(private))
    assert built.returncode == 0, built.stderr[-3000:]
    statement = json.loads(Path(built.json()["proof"]["documents"]["provenance"]["path"]).read_bytes())
    modules = {
        s["annotations"]["imagegen:op"]: s["name"]
        for s in statement["subject"]
        if "imagegen:op" in s.get("annotations", {})
    }
    made: list[str] = []
    yield {"public": str(public), "modules": modules, "made": made, "statement": statement}
    for tag in [*made, SIGNED]:
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


def _derive(
    client: Any, signed: dict[str, Any], name: str, files: dict[str, bytes], lines: tuple[str, ...] = ()
) -> str:
    tag = f"imagegen-it/outside-{name}:1"
    derive(client, tag, SIGNED, files, {}, lines)
    signed["made"].append(tag)
    return tag


def _verify(signed: dict[str, Any], tag: str) -> tuple[int, str, str]:
    """Exit code, every problem ``--json`` names (the proof's, or the error's where the forgery
    also stopped the ops from being checked in the container), and the text run's stderr."""
    result = imagegen("verify", tag, "--key", signed["public"], "--json")
    document = result.json()
    proof = document.get("proof")
    if proof is not None:
        assert proof["signed"] is True and proof["ok"] is False
        problems = " | ".join(f"{m['op']}: {m['problem']}" for m in proof["mismatches"])
    else:
        problems = document["error"]["message"]
    text = imagegen("verify", tag, "--key", signed["public"])
    assert text.returncode == result.returncode
    return result.returncode, problems, text.stderr


def _forged_module(signed: dict[str, Any]) -> dict[str, bytes]:
    return {signed["modules"]["cpu_lion"]: b"\x7fELF forged"}


def test_the_signed_image_verifies_from_outside_with_nothing_added(signed: dict[str, Any]) -> None:
    runtime = signed["statement"]["predicate"]["buildDefinition"]["internalParameters"]["runtime"]
    assert runtime["layers"] and runtime["python"]["site_dirs"] == [SITE]
    names = {s["name"].split("@")[0] for s in signed["statement"]["subject"]}
    assert {"pkg:pypi/torch", "pkg:pypi/imagegen", "pkg:pypi/numpy"} <= names  # every distribution
    result = imagegen("verify", SIGNED, "--key", signed["public"], "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    proof = result.json()["proof"]
    assert proof["signed"] is True and proof["ok"] is True
    assert proof["added"] == [] and proof["settings"] == []


@pytest.mark.parametrize(
    ("name", "extra", "lines", "named"),
    [
        # A module replaced, and a .pth hook to make the image's Python lie about it.
        (
            "pth",
            {f"{SITE}/zz_hook.pth": b"import zz_hook\n", f"{SITE}/zz_hook.py": HOOK},
            (),
            f"{SITE}/zz_hook.pth",
        ),
        # The same through PYTHONPATH and a sitecustomize there.
        (
            "pythonpath",
            {"/opt/hooks/sitecustomize.py": HOOK},
            ("ENV PYTHONPATH=/opt/hooks",),
            "PYTHONPATH=/opt/hooks",
        ),
        # A sitecustomize in the site folder itself.
        ("sitecustomize", {f"{SITE}/sitecustomize.py": HOOK}, (), f"{SITE}/sitecustomize.py"),
    ],
)
def test_a_replaced_module_with_a_hook_fails_naming_both(
    docker_client: Any,
    signed: dict[str, Any],
    name: str,
    extra: dict[str, bytes],
    lines: tuple[str, ...],
    named: str,
) -> None:
    tag = _derive(docker_client, signed, name, {**_forged_module(signed), **extra}, lines)
    code, problems, text = _verify(signed, tag)
    assert code == 1
    module = signed["modules"]["cpu_lion"]
    assert named in problems and f"cpu_lion: module {module} is not the one that was signed" in problems
    assert named in text and module in text


@pytest.mark.parametrize(
    ("name", "path", "data"),
    [
        # A package folder beside the module: imported instead of it, running its own code.
        ("shadow", f"{SITE}/kernels/_ops/cpu_lion/__init__.py", b"from . import real\n"),
        # The Python front that runs at import.
        ("front", f"{SITE}/kernels/optim/cpu.py", b"raise SystemExit('forged')\n"),
        # A trojaned torch.
        ("torch", f"{SITE}/torch/__init__.py", HOOK),
        # A bytecode file standing in for a signed source.
        ("pycache", f"{SITE}/__pycache__/typing_extensions.cpython-311.pyc", b"forged"),
        # A module named like a signed one in the folder scripts run from.
        ("workdir", "/home/imagegen/torch.py", HOOK),
    ],
)
def test_a_changed_signed_file_fails_naming_its_path(
    docker_client: Any, signed: dict[str, Any], name: str, path: str, data: bytes
) -> None:
    tag = _derive(docker_client, signed, name, {path: data})
    code, problems, text = _verify(signed, tag)
    assert code == 1 and path in problems, text[-2000:]
    assert path in text


def test_a_trojaned_torch_with_a_new_distribution_fails_and_lists_the_distribution(
    docker_client: Any, signed: dict[str, Any]
) -> None:
    # A file torch does not import at start, so the ops still run and the whole report comes back.
    files = {
        f"{SITE}/torch/utils/trojan.py": HOOK,
        f"{SITE}/extra-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: extra\nVersion: 1.0\n",
        f"{SITE}/extra.py": b"VALUE = 1\n",
    }
    tag = _derive(docker_client, signed, "torch-extra", files)
    result = imagegen("verify", tag, "--key", signed["public"], "--json")
    assert result.returncode == 1
    proof = result.json()["proof"]
    assert [m["problem"].split(":")[0] for m in proof["mismatches"]] == [f"{SITE}/torch/utils/trojan.py"]
    assert f"{SITE}/extra.py" in proof["added"] and f"{SITE}/extra-1.0.dist-info/METADATA" in proof["added"]


def test_an_app_folder_on_top_still_verifies_and_is_listed(
    docker_client: Any, signed: dict[str, Any]
) -> None:
    files = {"/app/main.py": b"import kernels\n", "/app/helpers.py": b"X = 1\n"}
    tag = _derive(
        docker_client,
        signed,
        "app",
        files,
        ("WORKDIR /app", 'CMD ["python", "/app/main.py"]', "USER 10001:10001"),
    )
    result = imagegen("verify", tag, "--key", signed["public"], "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    proof = result.json()["proof"]
    assert proof["ok"] is True and proof["signed"] is True
    assert proof["added"] == ["/app/main.py", "/app/helpers.py"] or sorted(proof["added"]) == [
        "/app/helpers.py",
        "/app/main.py",
    ]
    assert any(s.startswith("cmd ") for s in proof["settings"]) and any(
        s.startswith("working_dir ") for s in proof["settings"]
    )
    text = imagegen("verify", tag, "--key", signed["public"])
    assert text.returncode == 0 and "/app/main.py" in text.stdout and "added on top" in text.stdout


def _entries(layer: Layer) -> set[tuple[str, str, int, str, str | None]]:
    # A hard link is a file of its own in a layer's folder, a link to an earlier member in the
    # export's tar: compared by path only (below); the tar's root entry has no folder.
    return {
        (e.path, e.kind, e.size, e.target, e.sha256)
        for e in layer.entries
        if e.path != "/" and e.kind != "hardlink"
    }


def test_the_export_and_the_layer_folders_read_the_same_layers(
    docker_client: Any, signed: dict[str, Any]
) -> None:
    info = docker_client.api.inspect_image(SIGNED)
    ids = info["RootFS"]["Layers"]
    folders = layer_dirs(info)
    assert folders is not None, "the engine here keeps overlay2 layer folders"
    wanted = set(signed["modules"].values())
    exported = image_layers(docker_client, SIGNED, lambda p: p in wanted or p.endswith(".py"))
    for layer, folder in zip(ids, folders, strict=True):
        read = read_dir_layer(layer, folder, lambda p: p in wanted or p.endswith(".py"), lambda _: False)
        assert _entries(read) >= _entries(exported[layer]), layer
        hard = {e.path for e in exported[layer].entries if e.kind == "hardlink"}
        assert {e[0] for e in _entries(read) - _entries(exported[layer])} <= hard, layer


@pytest.mark.parametrize("reader", ["folders", "export"])
def test_both_readers_judge_a_derived_image_the_same(
    docker_client: Any, signed: dict[str, Any], monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    tag = _derive(
        docker_client, signed, f"both-{reader}", {f"{SITE}/zz_hook.pth": b"import os\n", "/app/a.py": b""}
    )
    if reader == "export":
        monkeypatch.setattr(outside, "layer_dirs", lambda info: None)
    check = check_image(tag, load_public_key(Path(signed["public"])))
    assert check is not None and check.signed is True
    assert [m.problem.split(":")[0] for m in check.mismatches] == [f"{SITE}/zz_hook.pth"]
    assert check.derived is not None and check.derived.added == ("/app/a.py",)
