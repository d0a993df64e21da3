"""The table ``imagegen verify`` and ``imagegen build`` print for a verified image."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from imagegen.verify import VerifyResult
from op_builder.binary import Audit
from op_builder.report import SelfTestResult


def render_table(result: VerifyResult) -> Table:
    runtime = f"torch {result.torch}"
    if result.cuda:
        runtime += f", CUDA {result.cuda}"
    if result.hip:
        runtime += f", HIP {result.hip}"
    verdict = "[green]ok[/green]" if result.ok else "[red]FAILED[/red]"
    table = Table(title=f"{escape(result.image)} — {runtime} — {verdict} ({result.seconds:.1f}s)")
    for name in ("op", "ok", "loaded from", "self-test", "device code", "seconds"):
        table.add_column(name, justify="right" if name == "seconds" else "left")
    table.add_column("problem", overflow="fold")
    for op in result.ops:
        table.add_row(
            op.name,
            "[green]yes[/green]" if op.ok else "[red]no[/red]",
            op.source or "-",
            _selftest(op.selftest),
            _device_code(op.binary),
            f"{op.seconds:.3f}",
            escape("; ".join(op.problems())),
        )
    skipped = result.gpu_selftests_skipped
    if skipped:
        # Said plainly: these ops loaded and their GPU code was audited, but no kernel of theirs ran.
        where = (
            "no GPU was passed to the container (--gpus all)" if result.gpus is None else "no GPU was visible"
        )
        table.caption = f"GPU self-tests skipped ({', '.join(skipped)}): {where}"
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
