"""scripts/stable_abi_images.py's judgement, fed what two builds can report: each wrong answer fails.

The run itself (two CUDA images, several GB) is `make stable-abi-images`; docs/benchmarks.md
records its result.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "stable_abi_images.py"
images = load_script(SCRIPT, "stable_abi_images_script")
SITE = "/opt/venv/lib/python3.12/site-packages"
MODULES = {
    "sha256:op-layer": {
        f"{SITE}/kernels/_ops/fused_lion.abi3.so": "aa",
        f"{SITE}/kernels/_ops/fused_adam.abi3.so": "bb",
    }
}


def _image(torch: str, hits: int, misses: int) -> dict[str, Any]:
    ops = [{"name": "fused_lion", "source": "aot"}, {"name": "fused_adam", "source": "aot"}]
    return {
        "tag": f"imagegen-stable-abi/cuda13.0:torch{torch}",
        "torch": torch,
        "exit": 0,
        "build": {"ok": True, "verify": {"ops": ops}, "compile_cache": {"hits": hits, "misses": misses}},
        "modules": copy.deepcopy(MODULES),
    }


def _pair() -> tuple[dict[str, Any], dict[str, Any]]:
    return _image("2.14.1", 0, 4), _image("2.15.0", 4, 0)


def test_the_same_modules_compiled_once_are_proven() -> None:
    assert images.judge(*_pair()) == []


def _broken_module(pair: Any) -> None:
    pair[1]["modules"]["sha256:op-layer"][f"{SITE}/kernels/_ops/fused_lion.abi3.so"] = "cc"


def _other_layer(pair: Any) -> None:
    pair[1]["modules"] = {"sha256:other-layer": pair[1]["modules"]["sha256:op-layer"]}


def _per_torch_modules(pair: Any) -> None:
    for image in pair:
        image["modules"] = {
            "sha256:op-layer": {f"{SITE}/kernels/_ops/fused_lion.cpython-312-x86_64-linux-gnu.so": "aa"}
        }


def _compiled_again(pair: Any) -> None:
    pair[1]["build"]["compile_cache"] = {"hits": 0, "misses": 4}


def _failed_build(pair: Any) -> None:
    pair[1]["exit"] = 1
    pair[1]["build"] = None


def _jit_op(pair: Any) -> None:
    pair[0]["build"]["verify"]["ops"][0]["source"] = "jit"


def _same_torch(pair: Any) -> None:
    pair[1]["torch"] = pair[0]["torch"]


@pytest.mark.parametrize(
    ("breakage", "says"),
    [
        (_broken_module, "the op modules' layers differ"),
        (_other_layer, "the op modules' layers differ"),
        (_per_torch_modules, "holds no stable (.abi3.so) op module"),
        (_compiled_again, "the second build compiled again: 4 misses, 0 hits (the first compiled 4)"),
        (_failed_build, "the build or its verification failed (exit 1)"),
        (_jit_op, "not every op loaded ahead of time"),
        (_same_torch, "the two images have the same torch release"),
    ],
)
def test_each_wrong_answer_fails_naming_it(breakage: Any, says: str) -> None:
    pair = _pair()
    breakage(pair)
    failed = images.judge(*pair)
    assert failed and says in " ".join(failed), failed
