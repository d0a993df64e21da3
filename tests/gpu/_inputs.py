"""Awkward placements of GPU test inputs: misaligned views and a side stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

R = TypeVar("R")

# About 30 ms of GPU time at H100 clocks: long enough that a kernel launched on the wrong
# stream runs before the side stream's writes land.
_SLEEP_CYCLES = 50_000_000


def offset_view(x: torch.Tensor, offset: int = 1) -> torch.Tensor:
    """A contiguous copy of ``x`` at storage offset ``offset``: with offset 1 its data pointer
    is aligned to one element only (``x[1:]`` of a fresh tensor), never to a vector of them."""
    flat = torch.empty(x.numel() + offset, dtype=x.dtype, device=x.device)
    view = flat[offset:].view(x.shape)
    view.copy_(x)
    assert view.storage_offset() == offset and view.is_contiguous()
    return view


def on_side_stream(device: torch.device, inputs: list[torch.Tensor], fn: Callable[[], R]) -> R:
    """``fn()`` on a fresh stream, right after that stream slowly writes ``inputs`` (each gets
    its own values again, after a sleep): a kernel launched on any other stream (the
    default or legacy stream) reads the inputs before the writes land and computes from
    the zeros they held. ``inputs`` must not be in use on other streams."""
    saved = [t.detach().clone() for t in inputs]
    with torch.no_grad():
        for t in inputs:
            t.zero_()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        torch.cuda._sleep(_SLEEP_CYCLES)
        with torch.no_grad():
            for t, value in zip(inputs, saved):
                t.copy_(value)
        result = fn()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)  # the tensors used on `side` may now be freed anywhere
    return result
