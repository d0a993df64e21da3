"""The table ``imagegen verify`` and ``imagegen build`` print for a verified image."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from imagegen.tables import fitted
from imagegen.verify.container import VerifyResult
from op_builder.binary import Audit
from op_builder.report import SelfTestResult

# Columns a narrow terminal drops, least useful first: the title has the total time, and an op
# that did not load ahead of time says where it loaded from in its problem.
DROPPABLE = ("seconds", "loaded from")


def render_table(result: VerifyResult, width: int | None = None) -> Table:
    """The table of ``result``; ``width``: the terminal's columns, to fit into.

    Op names stay whole (they are what a user copies into ``--ops``): where the table is too
    wide, the other columns wrap, then the least useful ones are dropped (``DROPPABLE``).
    """
    return fitted(lambda dropped: _table(result, dropped), DROPPABLE, width)


def _table(result: VerifyResult, dropped: tuple[str, ...]) -> Table:
    runtime = f"torch {result.torch}"
    if result.cuda:
        runtime += f", CUDA {result.cuda}"
    if result.hip:
        runtime += f", HIP {result.hip}"
    verdict = "[green]ok[/green]" if result.ok else "[red]FAILED[/red]"
    table = Table(title=f"{escape(result.image)} — {runtime} — {verdict} ({result.seconds:.1f}s)")
    columns = [
        c for c in ("op", "ok", "loaded from", "self-test", "device code", "seconds") if c not in dropped
    ]
    for name in columns:
        table.add_column(
            name,
            justify="right" if name == "seconds" else "left",
            no_wrap=name in ("op", "ok"),  # never cut: `cpu_adagr…` is no name to copy
        )
    table.add_column("problem", overflow="fold")
    for op in result.ops:
        cells = {
            "op": op.name,
            "ok": "[green]yes[/green]" if op.ok else "[red]no[/red]",
            "loaded from": op.source or "-",
            "self-test": _selftest(op.selftest),
            "device code": _device_code(op.binary),
            "seconds": f"{op.seconds:.3f}",
        }
        table.add_row(*(cells[c] for c in columns), escape("; ".join(op.problems())))
    captions = []
    skipped = result.gpu_selftests_skipped
    if skipped:
        # Said plainly: these ops loaded and their GPU code was audited, but no kernel of theirs ran.
        where = (
            "no GPU was passed to the container (--gpus all)" if result.gpus is None else "no GPU was visible"
        )
        captions.append(f"GPU self-tests skipped ({', '.join(skipped)}): {where}")
    # A CPU op's self-test that could not run where the image was checked: loaded, not run.
    captions += [f"{name} self-test skipped: {why}" for name, why in result.cpu_selftests_skipped]
    if captions:
        table.caption = escape("\n".join(captions))
    return table


def _selftest(test: SelfTestResult | None) -> str:
    if test is None:
        return "-"
    if test.skipped:
        return "[yellow]skipped[/yellow]"
    if not test.ok:
        return "[red]FAIL[/red]"
    return f"[green]pass[/green] ({test.isa})" if test.isa else "[green]pass[/green]"


def _device_code(audit: Audit | None) -> str:
    if audit is None:
        return "-"
    if audit.ok:
        return "[green]" + escape(" ".join(audit.planned) or "none") + "[/green]"
    return "[red]differs[/red]"
