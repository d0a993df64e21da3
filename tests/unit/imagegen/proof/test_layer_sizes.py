"""What each layer of an image holds, read from its entries (made here by hand)."""

from __future__ import annotations

from imagegen.engine.layers import Layer, LayerEntry
from imagegen.proof.layer_sizes import layer_sizes

SITE = "/opt/venv/lib/python3.11/site-packages"


def _layer(name: str, *entries: LayerEntry) -> Layer:
    return Layer(f"sha256:{name}", entries)


def _file(path: str, size: int) -> LayerEntry:
    return LayerEntry(path, "file", size)


LAYERS = [
    _layer("base", _file("/usr/bin/python3.11", 100), _file("/var/lib/dpkg/status", 10)),
    _layer(
        "apt",
        LayerEntry("/var", "dir"),
        _file("/var/lib/dpkg/status", 12),
        _file("/usr/lib/libgomp.so.1", 30),
    ),
    _layer(
        "deps",
        _file(f"{SITE}/torch/__init__.py", 7),
        _file(f"{SITE}/torch/lib/libtorch.so", 1000),
        LayerEntry("/opt/venv/bin/python", "symlink", target="/usr/bin/python3.11"),
    ),
    _layer(
        "modules",
        LayerEntry(f"{SITE}/kernels/_ops", "dir"),
        _file(f"{SITE}/kernels/_ops/cpu_adam.abi3.so", 20),
        _file(f"{SITE}/kernels/_ops/cpu_lion.abi3.so", 21),
    ),
    _layer(
        "ours",
        _file(f"{SITE}/kernels/_ops/async_io.cpython-311-x86_64-linux-gnu.so", 50),
        _file(f"{SITE}/imagegen-0.1.0.dist-info/RECORD", 3),
    ),
    _layer("empty"),
    _layer("proof", LayerEntry("/opt/imagegen/proof", "dir"), _file("/opt/imagegen/proof/sbom.cdx.json", 9)),
    _layer("app", _file("/app/main.py", 4)),
]


def test_each_layer_holds_what_its_entries_say_and_weighs_its_files() -> None:
    found = [(layer.diff_id, layer.holds, layer.bytes) for layer in layer_sizes(LAYERS, base_layers=1)]
    assert found == [
        ("sha256:base", "base", 110),
        ("sha256:apt", "OS libraries", 42),
        ("sha256:deps", "Python dependencies", 1007),
        ("sha256:modules", "op modules for every torch (stable ABI)", 41),
        ("sha256:ours", "our packages and op modules", 53),
        ("sha256:empty", "settings only", 0),
        ("sha256:proof", "proof", 9),
        ("sha256:app", "other", 4),
    ]
    # Without a base here, the base's layer is read for what it holds too.
    assert layer_sizes(LAYERS[:1], base_layers=0)[0].holds == "OS libraries"
