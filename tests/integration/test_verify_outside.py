"""`imagegen verify --key` on a real signed image (the session's, conftest's ``signed_cpu_image``)
and images derived from it, read from outside.

The signed image passes as exactly the signed one. Every derived image fails (exit 1) unless
`--derived` is asked for: the red-team's routes to code that runs before the op loads (a `.pth`
hook, `sitecustomize` on `PYTHONPATH`, a `[torch.backends]` entry point, Debian's
`apport_python_hook`, `/etc/python3.11/sitecustomize.py`, the interpreter's link chain,
OpenSSL's configuration, `ld.so.conf.d`, `BASH_ENV`, `DS_OP_SOURCES`, a `HEALTHCHECK`, a folder
opened to everyone, a working folder spelt otherwise, ...) are each such an image. With
`--derived` each addition is listed as not covered, those a rule knows flagged, and a replaced op
module still fails. The two readers of an image's layers (the engine's export, the local layer
folders) agree."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine.layer_dirs import layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, image_layers
from imagegen.proof import outside
from imagegen.proof.image_proof import check_image
from imagegen.proof.signing import load_public_key
from tests.integration.conftest import SIGNED_TAG, SignedImage, imagegen
from tests.integration.derived import derive

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SIGNED = SIGNED_TAG
SITE = "/opt/venv/lib/python3.11/site-packages"
PROOF_DIR = "/opt/imagegen/proof"
# What a forger's hook does once it runs: rewrite whatever the verifier prints to "all is well".
HOOK = b"import builtins; builtins.print = lambda *a, **k: None\n"


@pytest.fixture(scope="module")
def signed(signed_cpu_image: SignedImage, docker_client: Any) -> Iterator[dict[str, Any]]:
    documents = signed_cpu_image.summary["proof"]["documents"]
    statement = json.loads(Path(documents["provenance"]["path"]).read_bytes())
    modules = {
        s["annotations"]["imagegen:op"]: s["name"]
        for s in statement["subject"]
        if "imagegen:op" in s.get("annotations", {})
    }
    made: list[str] = []
    yield {
        "public": str(signed_cpu_image.keys.public),
        "modules": modules,
        "made": made,
        "statement": statement,
    }
    for tag in made:  # the signed image itself is the session's
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag, force=True)


def _derive(
    client: Any,
    signed: dict[str, Any],
    name: str,
    files: dict[str, bytes],
    lines: tuple[str, ...] = (),
    links: dict[str, str] | None = None,
) -> str:
    tag = f"imagegen-it/outside-{name}:1"
    derive(client, tag, SIGNED, files, links or {}, lines)
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


def test_the_signed_image_verifies_as_exactly_the_signed_one(signed: dict[str, Any]) -> None:
    runtime = signed["statement"]["predicate"]["buildDefinition"]["internalParameters"]["runtime"]
    assert runtime["format"] == 2 and runtime["layers"] and runtime["python"]["site_dirs"] == [SITE]
    assert runtime["settings"]["User"] and "Labels" not in runtime["settings"]
    names = {s["name"].split("@")[0] for s in signed["statement"]["subject"]}
    assert {"pkg:pypi/torch", "pkg:pypi/imagegen", "pkg:pypi/numpy"} <= names  # every distribution
    result = imagegen("verify", SIGNED, "--key", signed["public"], "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    proof = result.json()["proof"]
    assert proof["signed"] is True and proof["ok"] is True and proof["exact"] is True
    assert proof["derived"] is None
    text = imagegen("verify", SIGNED, "--key", signed["public"])
    assert text.returncode == 0 and "this is exactly the signed image" in text.stdout


# The red-team's routes, each a derived image: (name, files, links, Dockerfile lines, what the
# --derived listing names, whether a rule flags it).
RED_TEAM: list[tuple[str, dict[str, bytes], dict[str, str], tuple[str, ...], str, bool]] = [
    ("pth", {f"{SITE}/zz_hook.pth": b"import zz_hook\n", f"{SITE}/zz_hook.py": HOOK}, {}, (),
     f"{SITE}/zz_hook.pth", True),
    ("pythonpath", {"/opt/hooks/sitecustomize.py": HOOK}, {}, ("ENV PYTHONPATH=/opt/hooks",),
     "environment PYTHONPATH=/opt/hooks", True),
    ("entry-point", {f"{SITE}/evil-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: evil\n",
                     f"{SITE}/evil-1.0.dist-info/entry_points.txt": b"[torch.backends]\nevil = evil:hook\n",
                     f"{SITE}/evil.py": HOOK}, {}, (),
     f"{SITE}/evil-1.0.dist-info/entry_points.txt", True),
    ("apport", {"/usr/lib/python3/dist-packages/apport_python_hook.py": HOOK}, {}, (),
     "/usr/lib/python3/dist-packages/apport_python_hook.py", True),
    ("etc-sitecustomize", {"/etc/python3.11/sitecustomize.py": HOOK}, {}, (),
     "/etc/python3.11/sitecustomize.py", True),
    ("interpreter-link", {"/opt/evil/python3": b"#!/bin/sh\n"}, {"/usr/bin/python3": "/opt/evil/python3"}, (),
     "/usr/bin/python3", True),
    ("openssl", {"/etc/ssl/openssl.cnf": b"openssl_conf = evil\n"}, {}, (), "/etc/ssl/openssl.cnf", True),
    ("openssl-env", {"/opt/evil.cnf": b"x"}, {}, ("ENV OPENSSL_CONF=/opt/evil.cnf",),
     "environment OPENSSL_CONF=/opt/evil.cnf", True),
    ("ld-conf", {"/etc/ld.so.conf.d/evil.conf": b"/opt/evil\n"}, {}, (), "/etc/ld.so.conf.d/evil.conf", True),
    ("ds-op-sources", {"/opt/ops/x.py": HOOK}, {}, ("ENV DS_OP_SOURCES=/opt/ops",),
     "environment DS_OP_SOURCES=/opt/ops", True),
    ("bash-env", {"/opt/env.sh": b"echo\n"}, {}, ("ENV BASH_ENV=/opt/env.sh",), "environment BASH_ENV", True),
    ("path-link", {"/opt/evil/python": b"#!/bin/sh\n"}, {"/app/bin": "/opt/evil"},
     ("ENV PATH=/app/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
     "environment PATH=/app/bin", True),
    ("workdir-slash", {"/home/imagegen/torch.py": HOOK}, {}, ("WORKDIR /home/imagegen/.",),
     "/home/imagegen/torch.py", True),
    ("healthcheck", {}, {}, ('HEALTHCHECK CMD ["python", "-c", "open(\'/tmp/x\', \'w\')"]',),
     "Healthcheck", True),
    ("torch", {f"{SITE}/torch/__init__.py": HOOK}, {}, (), f"{SITE}/torch/__init__.py", True),
    ("front", {f"{SITE}/kernels/optim/cpu.py": b"raise SystemExit('forged')\n"}, {}, (),
     f"{SITE}/kernels/optim/cpu.py", True),
    ("open-folder", {}, {}, ("USER root", f"RUN chmod 0777 {SITE}", "USER 10001:10001"), SITE, True),
    ("app", {"/app/main.py": b"import kernels\n"}, {}, ("WORKDIR /app", 'CMD ["python", "/app/main.py"]'),
     "/app/main.py", False),
]  # fmt: skip


@pytest.fixture(scope="module")
def red_team(docker_client: Any, signed: dict[str, Any]) -> dict[str, str]:
    return {
        name: _derive(docker_client, signed, name, files, lines, links)
        for name, files, links, lines, _, _ in RED_TEAM
    }


@pytest.mark.parametrize(("name", "listed", "flagged"), [(c[0], c[4], c[5]) for c in RED_TEAM])
def test_every_derived_image_fails_and_is_listed_not_covered_as_derived(
    signed: dict[str, Any], red_team: dict[str, str], name: str, listed: str, flagged: bool
) -> None:
    public = load_public_key(Path(signed["public"]))
    check = check_image(red_team[name], public)
    assert check is not None and check.signed is True and not check.ok and check.exact is False
    assert "above the signed image's" in check.summary() or "setting is not the signed one" in check.summary()
    derived = check_image(red_team[name], public, derived=True)
    assert derived is not None and derived.ok, derived.summary() if derived else None
    document = derived.to_json()["derived"]
    assert document["covered"] is False
    items = [*document["added"], *document["settings"]]
    assert all(item["covered"] is False for item in items)
    found = [item for item in items if listed in str(item.get("path") or item.get("setting"))]
    assert found, (name, items)
    assert any(item["risk"] for item in found) == flagged, (name, found)


def test_the_cli_refuses_a_derived_image_and_lists_it_when_asked(
    signed: dict[str, Any], red_team: dict[str, str]
) -> None:
    plain = imagegen("verify", red_team["pth"], "--key", signed["public"])
    assert (
        plain.returncode == 1 and "above the signed image's" in plain.stderr and "--derived" in plain.stderr
    )
    # The .pth hook silences the image's Python, so its ops cannot be checked: that fails too.
    assert imagegen("verify", red_team["pth"], "--key", signed["public"], "--derived").returncode == 1
    asked = imagegen("verify", red_team["ld-conf"], "--key", signed["public"], "--derived")
    assert asked.returncode == 0, asked.stderr[-2000:]
    assert "NOT covered by the signature" in asked.stdout and "/etc/ld.so.conf.d/evil.conf" in asked.stdout
    assert "nothing that runs before" not in asked.stdout
    document = imagegen("verify", red_team["app"], "--key", signed["public"], "--derived", "--json").json()
    assert document["ok"] is True and document["proof"]["derived"]["covered"] is False
    assert imagegen("verify", red_team["app"], "--derived").returncode == 2  # --derived needs --key


@pytest.mark.parametrize(
    ("name", "extra", "lines"),
    [
        ("module-pth", {f"{SITE}/zz_hook.pth": b"import zz_hook\n", f"{SITE}/zz_hook.py": HOOK}, ()),
        ("module-pythonpath", {"/opt/hooks/sitecustomize.py": HOOK}, ("ENV PYTHONPATH=/opt/hooks",)),
    ],
)
def test_a_replaced_module_fails_even_as_derived(
    docker_client: Any, signed: dict[str, Any], name: str, extra: dict[str, bytes], lines: tuple[str, ...]
) -> None:
    tag = _derive(docker_client, signed, name, {**_forged_module(signed), **extra}, lines)
    result = imagegen("verify", tag, "--key", signed["public"], "--derived", "--json")
    assert result.returncode == 1
    proof = result.json().get("proof")
    problems = " | ".join(f"{m['op']}: {m['problem']}" for m in proof["mismatches"]) if proof else ""
    problems = problems or result.json()["error"]["message"]
    module = signed["modules"]["cpu_lion"]
    assert f"cpu_lion: module {module} is not the one that was signed" in problems or module in problems


def _entries(layer: Layer) -> set[tuple[str, str, int, str, str | None, int, int, int]]:
    # The tar's root entry, where a layer has one, has no folder of its own in the layer's folder.
    return {
        (e.path, e.kind, e.size, e.target, e.sha256, e.mode, e.uid, e.gid)
        for e in layer.entries
        if e.path != "/"
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
        assert _entries(read) == _entries(exported[layer]), layer


@pytest.mark.parametrize("name", ["pth", "interpreter-link", "open-folder"])
def test_the_export_lists_a_derived_image_as_the_layer_folders_do(
    signed: dict[str, Any], red_team: dict[str, str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    public = load_public_key(Path(signed["public"]))
    folders = check_image(red_team[name], public, derived=True)
    monkeypatch.setattr(outside, "layer_dirs", lambda info: None)
    exported = check_image(red_team[name], public, derived=True)
    assert folders is not None and exported is not None
    assert folders.to_json() == exported.to_json()
