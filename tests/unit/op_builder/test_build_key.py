"""The JIT cache key: follows the op's own sources and included headers, nothing else."""

from __future__ import annotations

from pathlib import Path

from op_builder import includes
from op_builder.context import OpFlags
from op_builder.loader import build_key, included_files
from op_builder.registry import get_builder


def _flags(tmp_path: Path, cxx: tuple[str, ...] = ("-O3",)) -> OpFlags:
    return OpFlags(
        name="probe",
        module="kernels._ops.probe",
        sources=(str(tmp_path / "src" / "op.cpp"),),
        include_dirs=(str(tmp_path / "inc"),),
        cxx=cxx,
        device_compiler=None,
        device=(),
        archs=(),
        ldflags=(),
        libraries=(),
    )


def _tree(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "src" / "op.cpp").write_text('#include "mine.h"\n#include <vector>\nint f();\n')
    (tmp_path / "inc" / "mine.h").write_text('#pragma once\n#include "deep.h"\n')
    (tmp_path / "inc" / "deep.h").write_text("#pragma once\n")
    (tmp_path / "inc" / "other_op.h").write_text("#pragma once\n")


def test_included_files_are_transitive_and_project_only(tmp_path: Path) -> None:
    _tree(tmp_path)
    names = {p.name for p in included_files(_flags(tmp_path))}
    assert names == {"op.cpp", "mine.h", "deep.h"}  # not other_op.h, not <vector>


def test_key_changes_with_what_the_op_uses_only(tmp_path: Path) -> None:
    _tree(tmp_path)
    flags = _flags(tmp_path)
    base = build_key(flags)
    (tmp_path / "inc" / "other_op.h").write_text("#pragma once\nint changed;\n")
    assert build_key(flags) == base  # another op's header: no rebuild
    (tmp_path / "inc" / "deep.h").write_text("#pragma once\nint changed;\n")
    changed = build_key(flags)
    assert changed != base  # a header it includes, two levels down: rebuild
    assert build_key(_flags(tmp_path, cxx=("-O2",))) != changed  # flags are in the key


def test_nvcc_threads_do_not_change_the_key_but_other_device_flags_do(tmp_path: Path) -> None:
    from dataclasses import replace

    _tree(tmp_path)
    base = replace(_flags(tmp_path), device_compiler="nvcc", device=("-O3", "--threads=1"))
    assert build_key(base) == build_key(replace(base, device=("-O3", "--threads=4")))
    assert build_key(base) != build_key(replace(base, device=("-O2", "--threads=1")))


def test_a_header_named_by_a_macro_is_in_the_key(tmp_path: Path) -> None:
    # The CPU optimizers' shape: the op names its kernel header once, a shared dispatcher includes it.
    _tree(tmp_path)
    (tmp_path / "src" / "op.cpp").write_text('#define KERNEL "impl.h"\n#include "dispatch.h"\n')
    (tmp_path / "inc" / "dispatch.h").write_text("#pragma once\n#include KERNEL\n")
    (tmp_path / "inc" / "impl.h").write_text('#include "deep.h"\nint impl;\n')
    flags = _flags(tmp_path)
    assert {p.name for p in included_files(flags)} == {"op.cpp", "dispatch.h", "impl.h", "deep.h"}
    base = build_key(flags)
    (tmp_path / "inc" / "impl.h").write_text('#include "deep.h"\nint impl_changed;\n')
    assert build_key(flags) != base
    # A macro that is not a header's name (a version string) names nothing.
    (tmp_path / "src" / "op.cpp").write_text('#define VERSION "1.2"\n')
    assert {p.name for p in included_files(flags)} == {"op.cpp"}


def test_our_cpu_optimizers_keys_follow_their_kernel_headers() -> None:
    # Each names its kernel header by macro only (cpu_optim_dispatch.h includes it).
    for op, kernel in (("cpu_adam", "cpu_adam_impl.h"), ("cpu_adagrad", "cpu_adagrad_impl.h"),
                       ("cpu_lion", "cpu_lion_impl.h")):  # fmt: skip
        builder = get_builder(op)
        found = includes.scan(
            [Path(s) for s in builder.source_paths()], [Path(d) for d in builder.include_paths()]
        )
        assert kernel in {p.name for p in found.files}, op
        assert "torch/extension.h" in found.names or "cpu_simd.h" in found.names, op
