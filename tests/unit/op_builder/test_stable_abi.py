"""The stable-ABI rules: which builds are stable, their flags and namespace, the symbol check and
its tables, and when a stable module may load. Real compiled modules: tests/kernels."""

from __future__ import annotations

from pathlib import Path

import abi3info
import pytest
import torch

from op_builder import stable_abi
from op_builder.manifest import InstalledOp, Manifest

# ------------------------------------------------------------------ which builds are stable


@pytest.mark.parametrize(
    ("declared", "torch_version", "accelerator", "expected"),
    [
        ("2.10", "2.10.0", "cpu", "2.10"),
        ("2.10", "2.13.0+cpu", "cpu", "2.10"),
        ("2.10", "2.15.0+cu130", "cuda", "2.10"),
        ("2.10", "2.9.1+cu128", "cuda", None),  # no stable API our bindings use before 2.10
        ("2.10", "2.4.1", "cpu", None),
        ("2.12", "2.11.0", "cpu", None),  # headers older than the target cannot build it
        ("2.10", "2.13.0", "rocm", None),  # ROCm keeps per-torch modules for now
        (None, "2.13.0", "cpu", None),  # the op has no stable binding
        ("2.10", None, "cpu", None),
        ("2.10", "not a version", "cpu", None),
    ],
)
def test_stable_target(
    declared: str | None, torch_version: str | None, accelerator: str, expected: str | None
) -> None:
    assert stable_abi.stable_target(declared, torch_version, accelerator) == expected


def test_both_platforms_build_stable_modules_and_rocm_does_not() -> None:
    assert stable_abi.stable_target("2.10", "2.13.0", "cpu", "linux/amd64") == "2.10"
    assert stable_abi.stable_target("2.10", "2.10.0", "cpu", "linux/arm64") == "2.10"
    assert stable_abi.stable_target("2.10", "2.13.0", "rocm", "linux/amd64") is None
    assert stable_abi.stable_target("2.10", "2.13.0", "cpu", "linux/riscv64") is None


def test_version_macro_encodes_as_torch_headers_do() -> None:
    # torch/headeronly/version.h: ((major << 56) | (minor << 48)), written out by hand here.
    assert stable_abi.version_macro("2.10") == "0x020a000000000000"
    assert int(stable_abi.version_macro("2.13"), 16) == (2 << 56) | (13 << 48)
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        stable_abi.version_macro("2.10.0")


def test_defines_name_the_target_namespace_and_cuda() -> None:
    cpu = stable_abi.defines("2.10", "imagegen_x_0", "cpu")
    assert cpu == (
        "-DIMAGEGEN_STABLE_ABI",
        "-DTORCH_TARGET_VERSION=0x020a000000000000",
        "-DIMAGEGEN_OP_NAMESPACE=imagegen_x_0",
    )
    assert stable_abi.defines("2.10", "imagegen_x_0", "cuda")[-1] == "-DUSE_CUDA"


def test_namespace_follows_what_the_module_is_made_of() -> None:
    one = stable_abi.namespace("cpu_lion", [b"source A", b"-O3"])
    assert one == stable_abi.namespace("cpu_lion", [b"source A", b"-O3"])
    assert one != stable_abi.namespace("cpu_lion", [b"source B", b"-O3"])
    assert one != stable_abi.namespace("cpu_adam", [b"source A", b"-O3"])
    # Parts are length-prefixed: moving bytes between two parts is another build.
    assert stable_abi.namespace("op", [b"ab", b"c"]) != stable_abi.namespace("op", [b"a", b"bc"])
    assert one.isidentifier() and one.startswith("imagegen_cpu_lion_")


# ------------------------------------------------------------------ the symbol check

SHIMS = {"torch_get_num_threads": (2, 10), "torch_from_blob": (2, 11), "torch_new_stable_ivalue": (2, 13)}
ABI3 = frozenset({"PyModule_Create2", "PyModule_AddStringConstant", "_Py_Dealloc"})


def test_a_module_within_its_target_passes() -> None:
    symbols = [
        "PyModule_Create2",
        "_Py_Dealloc",
        "aoti_torch_get_numel",  # unlisted: older than 2.10
        "torch_get_num_threads",
        "GOMP_parallel",
        "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",  # the C++ library's
        "__cxa_throw",
    ]
    report = stable_abi.classify(symbols, "2.10", SHIMS, ABI3)
    assert report.ok and report.describe() == ""


@pytest.mark.parametrize(
    "symbol",
    [
        "_ZN3c1019UndefinedTensorImpl10_singletonE",  # c10:: data
        "_ZN2at15get_num_threadsEv",  # at:: function
        "_ZNK2at10TensorBase8data_ptrEv",  # const method
        "_ZTVN3c1011StorageImplE",  # vtable
        "_ZTIN3c105ErrorE",  # type info
        "_ZN5torch8autograd12VariableInfoC1Ev",
        "_ZN8pybind116detail11get_internalsEv",
    ],
)
def test_torch_cxx_symbols_fail(symbol: str) -> None:
    report = stable_abi.classify([symbol], "2.10", SHIMS, ABI3)
    assert report.torch_cxx == (symbol,) and not report.ok
    assert symbol in report.describe()


def test_shims_newer_than_the_target_fail_with_their_release() -> None:
    report = stable_abi.classify(["torch_from_blob", "torch_new_stable_ivalue"], "2.10", SHIMS, ABI3)
    assert report.newer_shims == ("torch_from_blob (2.11)", "torch_new_stable_ivalue (2.13)")
    assert stable_abi.classify(["torch_from_blob"], "2.11", SHIMS, ABI3).ok


def test_python_symbols_outside_abi3_fail() -> None:
    report = stable_abi.classify(
        ["PyModule_Create2", "PyUnicode_AsUTF8", "_PyObject_GC_New"], "2.10", SHIMS, ABI3
    )
    assert report.python == ("PyUnicode_AsUTF8", "_PyObject_GC_New")


def test_the_description_is_bounded() -> None:
    symbols = [f"_ZN2at{i}xEv" for i in range(10, 20)]
    text = stable_abi.classify(symbols, "2.10", SHIMS, ABI3).describe()
    assert "and 5 more" in text and text.count("_ZN2at") == 5


# ------------------------------------------------------------------ the tables and their sources


def test_the_shim_table_holds_what_this_torchs_headers_declare() -> None:
    from_headers = stable_abi.shims_from_headers(Path(torch.__file__).parent / "include")
    assert from_headers, "the installed torch has no versioned C shims: is it older than 2.10?"
    table = stable_abi.shim_versions()
    assert {name: table.get(name) for name in from_headers} == from_headers


def test_the_shim_table_agrees_with_torchs_published_list() -> None:
    # From torch/csrc/stable/c/shim_function_versions.txt in pytorch/pytorch, copied by hand.
    published = {
        "torch_get_num_threads": (2, 10),
        "torch_parallel_for": (2, 10),
        "torch_library_impl": (2, 10),
        "torch_from_blob": (2, 11),
        "aoti_torch_cpu_nonzero_static": (2, 11),
        "torch_library_def_with_tags": (2, 12),
        "torch_new_stable_ivalue": (2, 13),
    }
    table = stable_abi.shim_versions()
    assert {name: table.get(name) for name in published} == published
    assert "aoti_torch_get_numel" not in table  # older than 2.10: not listed


def test_shims_from_headers_follows_guards_and_nesting(tmp_path: Path) -> None:
    header = tmp_path / "torch/csrc/stable/c/shim.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "AOTI_TORCH_EXPORT AOTITorchError aoti_torch_old(int x);\n"
        "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0\n"
        "AOTI_TORCH_EXPORT AOTITorchError torch_ten(\n    int x);\n"
        "#ifdef USE_CUDA\n"
        "AOTI_TORCH_EXPORT AOTITorchError torch_ten_cuda(void* s);\n"
        "#endif\n"
        "// torch_in_a_comment(\n"
        "#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0\n"
        "AOTI_TORCH_EXPORT AOTITorchError torch_twelve(int x);\n"
        "#endif\n"
        "#endif // TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0\n"
        "AOTI_TORCH_EXPORT AOTITorchError aoti_torch_after(int x);\n"
    )
    assert stable_abi.shims_from_headers(tmp_path) == {
        "torch_ten": (2, 10),
        "torch_ten_cuda": (2, 10),
        "torch_twelve": (2, 12),
    }


def test_the_abi3_table_is_cpython_310s_stable_abi() -> None:
    expected = {
        member.symbol.linux
        for member in (*abi3info.FUNCTIONS.values(), *abi3info.DATAS.values())
        if (member.added.major, member.added.minor) <= (3, 10)
    }
    table = stable_abi.abi3_symbols()
    assert table == expected
    assert "PyModule_Create2" in table and "PyUnicode_AsUTF8AndSize" in table
    assert "PyType_GetModuleByDef" not in table  # 3.13


# ------------------------------------------------------------------ loading


@pytest.mark.parametrize(
    ("torch_version", "built", "running", "refusal"),
    [
        ("2.10.0", ("", None), ("", None), None),
        ("2.15.0+cu130", ("", None), ("cuda", "13.0"), None),  # a CPU op runs under any torch
        ("2.9.1", ("", None), ("", None), "it needs torch 2.10 or newer"),
        ("2.11.0+cu130", ("cuda", "13.0"), ("cuda", "13.2"), None),  # minor releases share a major
        (
            "2.11.0+cu128",
            ("cuda", "13.0"),
            ("cuda", "12.8"),
            "built for CUDA 13, but torch 2.11.0+cu128 uses CUDA 12",
        ),
        ("2.11.0+cpu", ("cuda", "13.0"), ("", None), "built for CUDA 13, but torch 2.11.0+cpu has no CUDA"),
        (
            "2.11.0+rocm7.0",
            ("hip", "7.0"),
            ("hip", "6.4"),
            "built for HIP 7, but torch 2.11.0+rocm7.0 uses HIP 6",
        ),
    ],
)
def test_load_refusal(
    torch_version: str, built: tuple[str, str | None], running: tuple[str, str | None], refusal: str | None
) -> None:
    why = stable_abi.load_refusal("2.10", torch_version, built, running)
    if refusal is None:
        assert why is None
    else:
        assert why is not None and refusal in why


@pytest.mark.parametrize(
    ("target", "built_cuda", "says"),
    [
        ("2.99", None, "built for torch >= 2.99 (stable ABI), but this is torch"),
        ("2.10", "99.0", "built for CUDA 99, but torch"),
    ],
)
def test_the_loader_says_why_an_installed_stable_module_does_not_fit(
    monkeypatch: pytest.MonkeyPatch, target: str, built_cuda: str | None, says: str
) -> None:
    from op_builder import get_builder, loader
    from op_builder.errors import OpLoadError

    # A GPU op for the CUDA case: a CPU op's stable module runs under any torch's CUDA.
    name = "cpu_lion" if built_cuda is None else "fused_lion"
    entry = InstalledOp(name, f"kernels._ops.{name}", "cpu" if built_cuda is None else "gpu", (), {}, target)
    installed = Manifest(torch.__version__, built_cuda, None, "cpu", "3.11", {name: entry})
    monkeypatch.setattr(loader, "read_installed", lambda: installed)
    monkeypatch.setattr(loader, "_LOADED", {})
    with pytest.raises(OpLoadError) as raised:
        loader.load_op(get_builder(name), {"DS_DISABLE_JIT": "1"})
    assert says in raised.value.message and "JIT builds are disabled" in raised.value.message


def test_the_manifest_keeps_an_ops_stable_target() -> None:
    ops = {
        "cpu_lion": InstalledOp("cpu_lion", "kernels._ops.cpu_lion", "cpu", (), {}, "2.10"),
        "async_io": InstalledOp("async_io", "kernels._ops.async_io", "cpu", ()),
    }
    manifest = Manifest("2.13.0", None, None, "cpu", "3.11.7", ops, "linux/amd64")
    again = Manifest.from_json(manifest.to_json())
    assert again.ops["cpu_lion"].stable_abi == "2.10"
    assert again.ops["async_io"].stable_abi is None
    older = manifest.to_json()
    del older["ops"]["cpu_lion"]["stable_abi"]  # a manifest written before stable builds
    assert Manifest.from_json(older).ops["cpu_lion"].stable_abi is None
