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
from imagegen.proof.derived import judge, module_name, resolve
from imagegen.proof.runtime import PythonLayout, SignedRuntime, files_digest, make_runtime, merge, subjects

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
    assert entries["/lib"] == LayerEntry("/lib", "symlink", target="usr/lib")
    assert entries["/usr"].kind == "dir"
    kinds = [(e.path, e.kind) for e in layers[diff_id(top)].entries]
    assert kinds == [(f"{SITE}/torch", "whiteout"), ("/app", "opaque"), ("/app/main.py", "file")]
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
}
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
SIGNED = make_runtime(LAYOUT, [RUNTIME_LAYER.diff_id], CONFIG, merge([RUNTIME_LAYER]))
MODULES = {MODULE: ("cpu_lion", hashlib.sha256(b"lion").hexdigest())}
LINKS = {e.path: e.target for e in RUNTIME_LAYER.entries if e.kind == "symlink"}.get


def _judge(*entries: LayerEntry, config: dict[str, Any] | None = None) -> Any:
    return judge(SIGNED, [_layer(*entries)], {**CONFIG, **(config or {})}, MODULES, LINKS)


def test_the_signed_runtime_names_its_folders_and_settings() -> None:
    again = SignedRuntime.from_json(json.loads(json.dumps(SIGNED.to_json())))
    assert again == SIGNED
    assert SIGNED.names[SITE] == ("kernels", "six.py", "torch", "torch-2.13.0.dist-info")
    assert SIGNED.env == tuple(CONFIG["Env"]) and SIGNED.cmd == ("python",)
    with pytest.raises(ValueError, match="format"):
        SignedRuntime.from_json({"format": 99})


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
        (_file(f"{SITE}/zz.pth", b"import zz"), ".pth file"),
        (_file(f"{SITE}/sitecustomize.py"), "sitecustomize runs"),
        (_file(f"{SITE}/usercustomize/__init__.py"), "usercustomize runs"),
        (_file(f"{SITE}/__pycache__/six.cpython-311.pyc"), "__pycache__ runs"),
        (_file(f"{SITE}/kernels/_ops/cpu_lion/__init__.py"), "kernels, which was signed"),
        (_file(f"{SITE}/kernels/optim/cpu.py"), "kernels, which was signed"),
        (_file(f"{SITE}/torch/__init__.py", b"evil"), "torch, which was signed"),
        (LayerEntry(f"{SITE}/torch", "whiteout"), "torch, which was signed"),
        (LayerEntry(SITE, "opaque"), "replaces a folder the signed Python is in"),
        (LayerEntry("/opt/venv", "whiteout"), "deletes a folder the signed Python is in"),
        (LayerEntry("/opt", "symlink", target="/evil"), "replaces a folder the signed Python is in"),
        (_file(f"{STDLIB}/os.py", b"evil"), "standard library"),
        (_file(f"{STDLIB}/json/evil.py"), "standard library"),
        (_file("/usr/lib/python311.zip"), "standard library"),
        (_file("/usr/bin/python3.11", b"evil"), "interpreter's file"),
        (_file("/opt/venv/pyvenv.cfg", b"include-system-site-packages = true"), "interpreter's file"),
        (_file("/opt/venv/bin/torchrun", b"evil"), "torchrun, which was signed"),
        (_file("/etc/ld.so.preload", b"/evil.so"), "preloads"),
        (_file(f"{SITE}/os.py"), "shadows the signed module os"),
        (_file("/home/imagegen/torch.py"), "shadows the signed module torch for what runs in /home/imagegen"),
        (_file("/home/imagegen/six.cpython-311-x86_64-linux-gnu.so"), "shadows the signed module six"),
        # Through a symbolic link the runtime holds: /opt/app leads into the site folder.
        (_file("/opt/app/evil.pth"), ".pth file"),
    ],
)
def test_what_can_run_before_a_signed_file_fails_naming_its_path(entry: LayerEntry, named: str) -> None:
    judgement = _judge(entry)
    assert len(judgement.problems) == 1, judgement
    problem = judgement.problems[0]
    assert named in problem.problem and entry.path in problem.problem
    assert problem.op == ("cpu_lion" if entry.path == MODULE else None)
    assert judgement.added == ()


def test_what_cannot_run_before_a_signed_file_is_listed() -> None:
    judgement = _judge(
        LayerEntry("/app", "dir"),
        _file("/app/main.py"),
        _file("/app/torch.py"),  # an app's own module named like torch: not on any path run from here
        LayerEntry(f"{SITE}/kernels", "dir"),  # a folder's own entry (COPY writes the folders above it)
        _file(f"{SITE}/requests/__init__.py"),
        _file(f"{SITE}/requests-2.32.0.dist-info/METADATA"),
        _file("/opt/venv/bin/new-tool"),
        _file("/usr/lib/python3.11/site-packages/x.py"),  # the base interpreter's own site folder
        LayerEntry("/var/cache/apt", "whiteout"),
        _file("/opt/imagegen/proof/sbom.cdx.json"),  # the proof: checked against its labels
    )
    assert judgement.problems == ()
    assert judgement.added == (
        "/app/main.py",
        "/app/torch.py",
        f"{SITE}/requests/__init__.py",
        f"{SITE}/requests-2.32.0.dist-info/METADATA",
        "/opt/venv/bin/new-tool",
        "/usr/lib/python3.11/site-packages/x.py",
        "/var/cache/apt (deleted)",
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ("PYTHONPATH=/opt/hooks", "PYTHONPATH=/opt/hooks"),
        ("PYTHONSTARTUP=/x.py", "PYTHONSTARTUP"),
        ("PYTHONHOME=/x", "PYTHONHOME"),
        ("LD_PRELOAD=/x.so", "LD_PRELOAD"),
        ("LD_LIBRARY_PATH=/x", "LD_LIBRARY_PATH"),
        ("VIRTUAL_ENV=/other", "VIRTUAL_ENV"),
        ("PATH=/usr/bin", "no longer leads to the signed Python"),
    ],
)
def test_a_loader_variable_changed_fails_naming_it(env: str, named: str) -> None:
    name = env.partition("=")[0]
    kept = [e for e in CONFIG["Env"] if not e.startswith(name + "=")]
    problems = _judge(config={"Env": [*kept, env]}).problems
    assert len(problems) == 1 and named in problems[0].problem
    # Unset where it was set: fails too.
    if name in ("VIRTUAL_ENV", "DS_DISABLE_JIT"):
        assert "unset" in _judge(config={"Env": kept}).problems[0].problem


def test_settings_that_load_nothing_first_are_listed_and_a_python_ahead_on_path_fails() -> None:
    judgement = _judge(
        config={"Cmd": ["python", "/app/main.py"], "WorkingDir": "/app", "Env": [*CONFIG["Env"], "X=1"]}
    )
    assert judgement.problems == ()
    assert judgement.settings == ("environment X=1", "cmd ('python', '/app/main.py') (signed: ('python',))",
                                  "working_dir '/app' (signed: '/home/imagegen')")  # fmt: skip
    ahead = ["PATH=/app/bin:/opt/venv/bin:/usr/bin", *CONFIG["Env"][1:]]
    assert _judge(config={"Env": ahead}).problems == ()  # a folder ahead, with no python in it
    problems = _judge(_file("/app/bin/python3"), config={"Env": ahead}).problems
    assert [p.problem for p in problems] == [
        "/app/bin/python3: a python that PATH finds before the signed one"
    ]
    entry = _judge(config={"Entrypoint": ["env", "LD_PRELOAD=/x.so"]}).problems
    assert len(entry) == 1 and "entrypoint" in entry[0].problem


def test_a_derived_image_on_other_layers_fails_before_anything_is_read() -> None:
    # The layer check needs the engine (imagegen.proof.outside); its rule is the prefix: shown by
    # the signed section naming exactly the runtime's layers, in order.
    assert SIGNED.layers == (RUNTIME_LAYER.diff_id,)


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
