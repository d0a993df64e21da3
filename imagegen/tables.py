"""Fitting a rich table to a terminal by dropping its least useful columns."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table

ELLIPSIS = "…"


def fits(table: Table, width: int) -> bool:
    """Whether ``table`` prints in ``width`` columns without cutting any cell."""
    # Rendered, not measured: rich's minimum width is not what its layout keeps, and the layout
    # marks every cell it had to cut with an ellipsis.
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    given = sum(str(cell).count(ELLIPSIS) for column in table.columns for cell in column.cells)
    return out.getvalue().count(ELLIPSIS) <= given


def fitted(make: Callable[[tuple[str, ...]], Table], droppable: Sequence[str], width: int | None) -> Table:
    """``make(dropped)`` with the fewest of ``droppable`` (least useful first) left out to fit."""
    table = make(())
    for n in range(1, len(droppable) + 1):
        if width is None or fits(table, width):
            break
        table = make(tuple(droppable[:n]))
    return table
