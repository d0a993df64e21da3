"""The image read from outside: an engine export's layers (both layouts engines write, plain and
gzip), the file system they make, and what layers added on top of a signed runtime may do.

Layer tars are made here with tarfile and their digests taken with hashlib over the bytes, so the
reader is checked against what it must agree with, not against itself."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine.layer_dirs import dir_links, layer_dirs, read_dir_layer
from imagegen.engine.layers import Layer, LayerEntry, image_layers, read_export
from imagegen.errors import VerificationFailedError
from imagegen.proof.derived import Judgement, judge, module_name, resolve
from imagegen.proof.runtime import (
    SIGNED_SETTINGS,
    PythonLayout,
    SignedRuntime,
    changed_settings,
    files_digest,
    image_settings,
    make_runtime,
    merge,
    subjects,
)

SITE = "/opt/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
MODULE = f"{SITE}/kernels/_ops/cpu_lion.cpython-311-x86_64-linux-gnu.so"


def layer_tar(
    files: dict[str, bytes], links: dict[str, str] | None = None, dirs: tuple[str, ...] = ()
) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def export(layers: list[bytes], oci: bool = False, compress: bool = False) -> bytes:
    """An image export as `docker save` writes it: Docker's layout or an OCI layout."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        paths = []
        for index, data in enumerate(layers):
            blob = gzip.compress(data) if compress else data
            name = f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}" if oci else f"{index:064x}/layer.tar"
            add(name, blob)
            if not oci:
                add(f"{index:064x}/json", b'{"id": "x"}')
            paths.append(name)
        add("blobs/sha256/" + "c" * 64 if oci else "c" * 64 + ".json", b'{"rootfs": {}}')
        add("manifest.json", json.dumps([{"Layers": paths}]).encode())
    return out.getvalue()


def chunks(data: bytes, size: int = 7777) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def diff_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(("oci", "compress"), [(False, False), (True, False), (True, True)])
def test_an_export_is_read_as_layers_by_their_digests(oci: bool, compress: bool) -> None:
    base = layer_tar({"usr/bin/python3.11": b"ELF", f"{SITE[1:]}/torch/__init__.py": b"import x\n"},
                     {"lib": "usr/lib"}, dirs=("usr",))  # fmt: skip
    top = layer_tar({f"{SITE[1:]}/.wh.torch": b"", "app/.wh..wh..opq": b"", "app/main.py": b"print(1)\n"})
    empty = b"\0" * 1024  # the empty layer engines make for a metadata-only step
    layers = read_export(chunks(export([base, top, empty], oci, compress)), lambda p: p.endswith(".py"))
    assert set(layers) == {diff_id(base), diff_id(top), diff_id(empty)}
    entries = {e.path: e for e in layers[diff_id(base)].entries}
    assert entries[f"{SITE}/torch/__init__.py"].sha256 == hashlib.sha256(b"import x\n").hexdigest()
    assert entries["/usr/bin/python3.11"].sha256 is None  # not asked for
    assert entries["/lib"] == LayerEntry("/lib", "symlink", target="usr/lib", mode=0o777)
    assert entries["/usr"].kind == "dir"
    # The folders the tar leaves out are there as the engine makes them (root's, 0755), top first.
    kinds = [(e.path, e.kind) for e in layers[diff_id(top)].entries]
    folders = [(f, "dir") for f in ("/opt", "/opt/venv", "/opt/venv/lib", "/opt/venv/lib/python3.11", SITE)]
    assert kinds == [*folders, (f"{SITE}/torch", "whiteout"), ("/app", "dir"), ("/app", "opaque"),
                     ("/app/main.py", "file")]  # fmt: skip
    assert layers[diff_id(empty)].entries == ()


def test_a_damaged_export_is_a_verification_failure_not_a_traceback() -> None:
    data = export([layer_tar({"a": b"x" * 5000})])

    class Client:
        class api:
            @staticmethod
            def get_image(image: str, chunk_size: int) -> list[bytes]:
                return [data[:3000]]  # cut inside the layer

    with pytest.raises(VerificationFailedError, match="cannot be read as layers"):
        image_layers(Client(), "img")


def _layer(*entries: LayerEntry) -> Layer:
    return Layer("sha256:" + hashlib.sha256(repr(entries).encode()).hexdigest(), entries)


def _file(path: str, data: bytes = b"x") -> LayerEntry:
    return LayerEntry(path, "file", len(data), sha256=hashlib.sha256(data).hexdigest())


def test_the_merged_view_applies_whiteouts_and_opaque_folders() -> None:
    lower = _layer(_file("/a/one"), _file("/a/two"), _file("/b/x"), _file("/b/sub/y"), _file("/bb"))
    upper = _layer(LayerEntry("/a/one", "whiteout"), LayerEntry("/b", "opaque"), _file("/b/new"))
    view = merge([lower, upper])
    assert sorted(view) == ["/a/two", "/b/new", "/bb"]


LAYOUT = PythonLayout(
    executable="/opt/venv/bin/python",
    bin_dir="/opt/venv/bin",
    sys_path=("/usr/lib/python311.zip", STDLIB, f"{STDLIB}/lib-dynload", SITE),
    site_dirs=(SITE,),
    files=("/opt/venv/bin/python", "/usr/bin/python3.11", "/opt/venv/pyvenv.cfg"),
)
CONFIG: dict[str, Any] = {
    "Env": ["PATH=/opt/venv/bin:/usr/bin", "VIRTUAL_ENV=/opt/venv", "DS_DISABLE_JIT=1", "LANG=C.UTF-8"],
    "Entrypoint": None,
    "Cmd": ["python"],
    "WorkingDir": "/home/imagegen",
    "User": "10001:10001",
    "Labels": {"io.imagegen.ops": "cpu_lion"},
    "Hostname": "",
    "Image": "sha256:parent",
}
INFO: dict[str, Any] = {"Config": CONFIG, "Os": "linux", "Architecture": "amd64"}
RECORD = b"torch/__init__.py,sha256=x,9\ntorch-2.13.0.dist-info/RECORD,,\n../../../bin/torchrun,sha256=y,3\n"
RUNTIME_LAYER = _layer(
    LayerEntry("/opt/venv/bin/python", "symlink", target="/usr/bin/python3.11"),
    _file("/usr/bin/python3.11", b"ELF"),
    _file("/opt/venv/pyvenv.cfg", b"home = /usr/bin\n"),
    _file(f"{STDLIB}/os.py", b"os"),
    _file(f"{STDLIB}/lib-dynload/_ssl.so", b"ssl"),
    _file(f"{SITE}/torch/__init__.py", b"import torch._C\n"),
    LayerEntry(
        f"{SITE}/torch-2.13.0.dist-info/RECORD",
        "file",
        len(RECORD),
        sha256=hashlib.sha256(RECORD).hexdigest(),
        data=RECORD,
    ),
    _file("/opt/venv/bin/torchrun", b"run"),
    _file(f"{SITE}/kernels/__init__.py", b""),
    _file(f"{SITE}/six.py", b"six"),
    _file(MODULE, b"lion"),
    LayerEntry("/lib", "symlink", target="usr/lib"),
    LayerEntry("/opt/app", "symlink", target="venv/lib/python3.11/site-packages"),
)
SIGNED = make_runtime(LAYOUT, [RUNTIME_LAYER.diff_id], INFO, merge([RUNTIME_LAYER]))
MODULES = {MODULE: ("cpu_lion", hashlib.sha256(b"lion").hexdigest())}
LINKS = {e.path: e.target for e in RUNTIME_LAYER.entries if e.kind == "symlink"}.get


def _judge(*entries: LayerEntry, config: dict[str, Any] | None = None) -> Judgement:
    settings = image_settings({**INFO, "Config": {**CONFIG, **(config or {})}})
    return judge(SIGNED, [_layer(*entries)], settings, MODULES, LINKS)


def test_the_signed_runtime_names_its_folders_and_every_setting_but_labels() -> None:
    again = SignedRuntime.from_json(json.loads(json.dumps(SIGNED.to_json())))
    assert again == SIGNED
    assert SIGNED.names[SITE] == ("kernels", "six.py", "torch", "torch-2.13.0.dist-info")
    assert SIGNED.env == tuple(CONFIG["Env"]) and SIGNED.settings["Cmd"] == ["python"]
    assert SIGNED.settings["Platform"] == "linux/amd64"
    assert set(SIGNED.settings) == {*SIGNED_SETTINGS, "Platform"}
    assert "Labels" not in SIGNED.settings and "Image" not in SIGNED.settings
    with pytest.raises(ValueError, match="format"):
        SignedRuntime.from_json({"format": 99})
    old = {**SIGNED.to_json(), "format": 1}
    with pytest.raises(ValueError, match=r"format 1.*not its whole configuration"):
        SignedRuntime.from_json(old)


def test_settings_change_by_value_not_by_how_emptiness_is_written() -> None:
    empty = {"Volumes": {}, "OnBuild": [], "Shell": None, "Labels": {"other": "label"}, "Image": "sha256:x"}
    same = image_settings({**INFO, "Config": {**CONFIG, **empty}})
    assert changed_settings(SIGNED.settings, same) == []
    health = {"Test": ["CMD", "python", "-c", "import x"]}
    changed = image_settings({**INFO, "Config": {**CONFIG, "Healthcheck": health}, "Architecture": "arm64"})
    assert [key for key, _, _ in changed_settings(SIGNED.settings, changed)] == ["Healthcheck", "Platform"]


def test_each_distribution_is_named_by_a_digest_of_its_files() -> None:
    view = merge([RUNTIME_LAYER])
    found = {s["name"]: s for s in subjects(LAYOUT, view)}
    torch = found["pkg:pypi/torch@2.13.0"]
    # An independent digest: the lines as the module's doc defines them, hashed by hand.
    lines = sorted(
        f"{hashlib.sha256(data).hexdigest()}  {path}\n"
        for path, data in (
            (f"{SITE}/torch/__init__.py", b"import torch._C\n"),
            (f"{SITE}/torch-2.13.0.dist-info/RECORD", RECORD),
            ("/opt/venv/bin/torchrun", b"run"),
        )
    )
    assert torch["digest"]["sha256"] == hashlib.sha256("".join(lines).encode()).hexdigest()
    assert torch["annotations"]["imagegen:files"] == 3
    assert found[STDLIB]["annotations"]["imagegen:files"] == 2  # os.py and lib-dynload's module
    assert (
        found["/opt/venv/bin/python"]["digest"]["sha256"] == files_digest(["/opt/venv/bin/python"], view)[0]
    )
    # One byte of torch changed: its digest changes.
    changed = merge([RUNTIME_LAYER, _layer(_file(f"{SITE}/torch/__init__.py", b"import torch._C \n"))])
    again = {s["name"]: s for s in subjects(LAYOUT, changed)}
    assert again["pkg:pypi/torch@2.13.0"]["digest"] != torch["digest"]


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (_file(MODULE, b"forged"), "is not the one that was signed"),
        (LayerEntry(MODULE, "whiteout"), "is not the one that was signed"),
        (LayerEntry(f"{SITE}/kernels/_ops", "whiteout"), "deletes a folder of cpu_lion's signed module"),
        (LayerEntry(f"{SITE}/kernels", "symlink", target="/evil"), "replaces a folder of cpu_lion's"),
        (LayerEntry(SITE, "opaque"), "deletes a folder of cpu_lion's signed module"),
        (_file("/opt/imagegen/proof/sbom.cdx.json"), "changes the image's signed proof"),
        (LayerEntry("/opt/imagegen", "whiteout"), "changes the image's signed proof"),
        # Through a symbolic link the runtime holds: /opt/app leads into the site folder.
        (_file("/opt/app/kernels/_ops/cpu_lion.cpython-311-x86_64-linux-gnu.so"), "is not the one"),
    ],
)
def test_a_derived_image_that_replaces_a_signed_module_or_the_proof_fails(
    entry: LayerEntry, named: str
) -> None:
    judgement = _judge(entry)
    assert len(judgement.problems) == 1, judgement
    problem = judgement.problems[0]
    assert named in problem.problem and entry.path in problem.problem
    assert problem.op == (None if "proof" in named else "cpu_lion")
    assert entry.path not in [a.what for a in judgement.added]


# What a rule knows may run before a signed file: listed, not covered, flagged with why. The
# red-team's classes are among them; each is a warning, never a reason to pass or fail.
FLAGGED = [
    (_file(f"{SITE}/zz.pth", b"import zz"), ".pth file"),
    (_file(f"{SITE}/sitecustomize.py"), "sitecustomize runs"),
    (_file(f"{SITE}/usercustomize/__init__.py"), "usercustomize runs"),
    (_file(f"{SITE}/__pycache__/six.cpython-311.pyc"), "__pycache__ runs"),
    (_file(f"{SITE}/kernels/optim/cpu.py"), "kernels, which was signed"),
    (_file(f"{SITE}/torch/__init__.py", b"evil"), "torch, which was signed"),
    (LayerEntry(f"{SITE}/torch", "whiteout"), "torch, which was signed"),
    (LayerEntry(f"{STDLIB}/json", "whiteout"), "deletes a file of the standard library's folder"),
    (_file(f"{STDLIB}/os.py", b"evil"), "standard library"),
    (_file("/usr/lib/python311.zip"), "standard library"),
    (_file("/usr/bin/python3.11", b"evil"), "interpreter's file"),
    (_file("/opt/venv/pyvenv.cfg", b"include-system-site-packages = true"), "interpreter's file"),
    (_file("/opt/venv/bin/torchrun", b"evil"), "torchrun, which was signed"),
    (_file("/opt/venv/bin/pip3"), "beside the signed interpreter"),
    (_file("/etc/ld.so.preload", b"/evil.so"), "preloads"),
    (_file(f"{SITE}/os.py"), "shadows the signed module os"),
    (_file("/home/imagegen/torch.py"), "shadows the signed module torch for what runs in /home/imagegen"),
    (_file("/home/imagegen/six.cpython-311-x86_64-linux-gnu.so"), "shadows the signed module six"),
    (_file("/opt/app/evil.pth"), "through a symbolic link to"),
    (_file(f"{SITE}/evil-1.0.dist-info/entry_points.txt"), "torch.backends"),
    (_file("/etc/python3.11/sitecustomize.py"), "interpreter's configuration"),
    (LayerEntry("/usr/bin/python3", "symlink", target="/tmp/evil"), "interpreter"),
    (_file("/etc/ssl/openssl.cnf"), "OpenSSL"),
    (_file("/etc/ld.so.conf.d/evil.conf"), "dynamic loader"),
    (_file("/usr/lib/x86_64-linux-gnu/libz.so.1"), "system library"),
    (_file("/usr/lib/python3/dist-packages/apport_python_hook.py"), "system library"),
    (LayerEntry(SITE, "dir", mode=0o777), "users other than its owner"),
    (LayerEntry("/opt/venv/bin", "dir", uid=10001, gid=10001), "owned by 10001:10001"),
]


@pytest.mark.parametrize(("entry", "named"), FLAGGED)
def test_what_a_rule_knows_is_listed_not_covered_and_flagged(entry: LayerEntry, named: str) -> None:
    judgement = _judge(entry)
    assert judgement.problems == (), judgement
    [addition] = judgement.added
    assert addition.what.startswith(entry.path) and addition.risk is not None and named in addition.risk
    assert addition.to_json("path") == {"path": addition.what, "covered": False, "risk": addition.risk}


def test_what_no_rule_knows_is_listed_not_covered_and_never_called_harmless() -> None:
    judgement = _judge(
        LayerEntry("/app", "dir"),
        _file("/app/main.py"),
        _file("/app/torch.py"),  # an app's own module named like torch: not on any path run from here
        LayerEntry(f"{SITE}/kernels", "dir"),  # a folder's own entry, root's (COPY writes the folders above)
        _file(f"{SITE}/requests/__init__.py"),
        _file(f"{SITE}/requests-2.32.0.dist-info/METADATA"),
        _file("/srv/weights.bin"),
        LayerEntry("/var/cache/apt", "whiteout"),
    )
    assert judgement.problems == () and judgement.derived
    assert [(a.what, a.risk) for a in judgement.added] == [
        ("/app/main.py", None),
        ("/app/torch.py", None),
        (f"{SITE}/requests/__init__.py", None),
        (f"{SITE}/requests-2.32.0.dist-info/METADATA", None),
        ("/srv/weights.bin", None),
        ("/var/cache/apt (deleted)", None),
    ]
    document = judgement.to_json()
    assert document is not None and document["covered"] is False
    assert all(a["covered"] is False for a in document["added"])


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ("PYTHONPATH=/opt/hooks", "loads first"),
        ("PYTHONSTARTUP=/x.py", "loads first"),
        ("LD_PRELOAD=/x.so", "loads first"),
        ("VIRTUAL_ENV=/other", "loads first"),
        ("BASH_ENV=/x.sh", "loads first"),
        ("OPENSSL_CONF=/x.cnf", "loads first"),
        ("DS_OP_SOURCES=/x", "loads first"),
        ("PATH=/usr/bin", "no longer leads to the signed Python"),
        ("PATH=/x:/opt/venv/bin:/usr/bin", "searched before the signed Python's: /x"),
    ],
)
def test_a_loader_variable_changed_is_flagged(env: str, named: str) -> None:
    name = env.partition("=")[0]
    kept = [e for e in CONFIG["Env"] if not e.startswith(name + "=")]
    judgement = _judge(config={"Env": [*kept, env]})
    assert judgement.problems == ()
    [setting] = judgement.settings
    assert setting.what.startswith(f"environment {env}") and setting.risk and named in setting.risk
    if name in ("VIRTUAL_ENV",):  # unset where it was set: flagged too
        [unset] = _judge(config={"Env": kept}).settings
        assert "unset" in unset.what and unset.risk


def test_other_settings_are_listed_and_a_python_ahead_on_path_is_flagged() -> None:
    judgement = _judge(
        config={"Cmd": ["python", "/app/main.py"], "WorkingDir": "/app", "Env": [*CONFIG["Env"], "X=1"]}
    )
    assert judgement.problems == ()
    assert [(a.what, a.risk) for a in judgement.settings] == [
        ("Cmd ['python', '/app/main.py'] (signed: ['python'])", None),
        ("environment X=1 (signed: unset)", None),
        ("WorkingDir '/app' (signed: '/home/imagegen')", None),
    ]
    ahead = ["PATH=/app/bin:/opt/venv/bin:/usr/bin", *CONFIG["Env"][1:]]
    [path] = _judge(_file("/app/bin/python3"), config={"Env": ahead}).settings
    assert path.risk == "/app/bin/python3: a python that PATH finds before the signed one"
    entry = _judge(config={"Entrypoint": ["env", "LD_PRELOAD=/x.so"]}).settings
    assert len(entry) == 1 and entry[0].risk == "it runs before Python"
    health = _judge(config={"Healthcheck": {"Test": ["CMD-SHELL", "cp /x /opt/venv"]}}).settings
    assert len(health) == 1 and "while it runs" in str(health[0].risk)


@pytest.mark.parametrize("working_dir", ["/home/imagegen/", "/home/imagegen/.", "/opt/../home/imagegen"])
def test_the_working_folder_is_read_as_the_engine_reaches_it(working_dir: str) -> None:
    [shadow] = _judge(_file("/home/imagegen/torch.py"), config={"WorkingDir": working_dir}).added
    assert shadow.risk is not None and "shadows the signed module torch" in shadow.risk
    # Through a link the runtime holds: /opt/app is the site folder; and none set is the root.
    [linked] = _judge(_file(f"{SITE}/six.py"), config={"WorkingDir": "/opt/app"}).added
    assert linked.risk is not None and "six" in linked.risk
    [rooted] = _judge(_file("/torch.py"), config={"WorkingDir": ""}).added
    assert rooted.risk is not None and "shadows the signed module torch for what runs in /" in rooted.risk


def test_module_names_and_link_resolution() -> None:
    names = ("torch", "six.py", "x.cpython-311-x86_64-linux-gnu.so", "a.pth", "t-1.dist-info", "README.md")
    assert [module_name(n) for n in names] == ["torch", "six", "x", None, None, None]
    links = {"/lib": "usr/lib", "/a": "/b", "/b": "c"}
    assert resolve("/lib/x86_64/libc.so", links.get) == "/usr/lib/x86_64/libc.so"
    assert resolve("/a/file", links.get) == "/c/file"  # two hops
    assert resolve("/x/y", {"/x": "/x"}.get) == "/x/y"  # a loop ends


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout (mknod) and overlay's trusted attribute need root")
def test_a_layer_folder_reads_as_its_tar_would(tmp_path: Path) -> None:
    folder = tmp_path / "diff"
    (folder / "opt" / "app").mkdir(parents=True)
    (folder / "opt" / "app" / "main.py").write_bytes(b"print(1)\n")
    (folder / "lib").symlink_to("usr/lib")
    os.mknod(folder / "opt" / "gone", stat.S_IFCHR | 0o600, os.makedev(0, 0))  # overlay2's whiteout
    os.setxattr(folder / "opt" / "app", "trusted.overlay.opaque", b"y")
    layer = read_dir_layer("sha256:x", str(folder), lambda p: p.endswith(".py"), lambda _: False)
    assert sorted((e.path, e.kind) for e in layer.entries) == [
        ("/lib", "symlink"), ("/opt", "dir"), ("/opt/app", "dir"), ("/opt/app", "opaque"),
        ("/opt/app/main.py", "file"), ("/opt/gone", "whiteout"),
    ]  # fmt: skip
    main = next(e for e in layer.entries if e.path == "/opt/app/main.py")
    assert main.sha256 == hashlib.sha256(b"print(1)\n").hexdigest() and main.size == 9
    assert dir_links([str(tmp_path / "empty"), str(folder)])("/lib") == "usr/lib"
    assert dir_links([str(folder)])("/opt") is None


def test_layer_folders_are_used_only_where_the_engine_keeps_them_here(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    info: dict[str, Any] = {
        "GraphDriver": {
            "Name": "overlay2",
            "Data": {"UpperDir": str(tmp_path / "b"), "LowerDir": str(tmp_path / "a")},
        },
        "RootFS": {"Layers": ["sha256:1", "sha256:2"]},
    }
    assert layer_dirs(info, {}) == [str(tmp_path / "a"), str(tmp_path / "b")]  # bottom first
    assert layer_dirs(info, {"DOCKER_HOST": "unix:///var/run/docker.sock"}) is not None
    assert layer_dirs(info, {"DOCKER_HOST": "tcp://builder:2376"}) is None  # another machine's folders
    assert layer_dirs({**info, "GraphDriver": {**info["GraphDriver"], "Name": "vfs"}}, {}) is None
    assert layer_dirs({**info, "RootFS": {"Layers": ["sha256:1"]}}, {}) is None  # not one folder a layer
    missing = {**info, "GraphDriver": {"Name": "overlay2", "Data": {"UpperDir": str(tmp_path / "c")}}}
    assert layer_dirs({**missing, "RootFS": {"Layers": ["sha256:1"]}}, {}) is None
