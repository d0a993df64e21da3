"""Backward compatibility only: the self-test harness lives in ``op_builder.selftest``.

Op packages written against an earlier release import ``from kernels.selftests import
SelfTestContext, Tolerance``; those names (and ``EXACT``, ``GPU_TOLERANCE``) still import from here.
New code imports them from ``op_builder.selftest``. Each op's self-test is named by its builder
(``selftest = "module:function"``), ours too (``kernels/<family>/selftest.py``).
"""

from __future__ import annotations

from op_builder.selftest.harness import EXACT, GPU_TOLERANCE, SelfTestContext, Tolerance

__all__ = ["EXACT", "GPU_TOLERANCE", "SelfTestContext", "Tolerance"]
