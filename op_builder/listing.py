"""``python -m op_builder list``: the names of the ops the registry knows, one a line, in its order.

What scripts and benches ask instead of keeping a list of their own (``--gpu``: the ops with GPU
code, ``--cpu``: the C++ ones). ``--json``: ``{"ops": [{"name", "target", "origin"}]}``, the
fields as ``report`` writes them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Literal

from op_builder.builder import OpBuilder
from op_builder.commands import emit
from op_builder.op_sources import sources_from_env
from op_builder.registry import registry_for

Which = Literal["all", "cpu", "gpu"]


def op_names(ops: Mapping[str, OpBuilder], which: Which = "all") -> tuple[str, ...]:
    """The names of ``ops`` (a registry's, in its order): every one, or those of one target."""
    return tuple(name for name, builder in ops.items() if which in ("all", builder.target))


def cmd_list(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    registry = registry_for(sources_from_env(env))
    which: Which = "gpu" if args.gpu else "cpu" if args.cpu else "all"
    names = op_names(registry.ops, which)
    if args.json:
        ops, origins = registry.ops, registry.origins
        emit({"ops": [{"name": n, "target": ops[n].target, "origin": origins[n].to_json()} for n in names]})
    else:
        for name in names:
            print(name)
    return 0
