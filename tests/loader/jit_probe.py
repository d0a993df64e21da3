"""Loads a tiny real op through op_builder's JIT path and reports what happened (JSON)."""

from __future__ import annotations

import json
import os
import sys

from op_builder.builder import CPUOpBuilder
from op_builder.loader import load_op


class ProbeBuilder(CPUOpBuilder):
    name = "jit_probe"

    def source_paths(self) -> tuple[str, ...]:
        return (sys.argv[1],)

    def include_paths(self) -> tuple[str, ...]:
        return ()


if __name__ == "__main__":
    loaded = load_op(ProbeBuilder(), os.environ)
    print(
        json.dumps({"compiled": loaded.compiled, "source": loaded.source, "answer": loaded.module.answer()})
    )
