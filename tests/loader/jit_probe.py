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
    from op_builder.errors import OpLoadError

    try:
        loaded = load_op(ProbeBuilder(), os.environ)
    except OpLoadError as exc:  # what a user sees: the message and hint, no traceback
        print(f"error: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        sys.exit(1)
    print(
        json.dumps({"compiled": loaded.compiled, "source": loaded.source, "answer": loaded.module.answer()})
    )
