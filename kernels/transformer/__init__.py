"""Transformer building blocks backed by the ``transformer`` op: LayerNorm (plain, and of a
residual sum), bias + GeLU, and scaled masked softmax, each forward and backward.

Functions (``layer_norm``, ``residual_layer_norm``, ``bias_gelu``, ``scaled_masked_softmax``)
and modules (``FusedLayerNorm``, ``FusedResidualLayerNorm``, ``FusedBiasGelu``,
``FusedScaledMaskedSoftmax``). On CUDA / ROCm tensors of fp32, fp16 or bf16 they run the
compiled kernels (fp32 math; built with nvcc's fast math, which flushes fp32 values below
about 1.2e-38 to zero, so inputs that small, possible in fp32 and bf16, can differ from
torch's). Otherwise (CPU tensors, float64, op not available) they run
PyTorch code that implements the same formulas, forward and backward, and warn once with
the reason.

Conventions: LayerNorm normalizes over the trailing ``normalized_shape`` dims;
``approximate`` is ``"none"`` (erf) or ``"tanh"`` as in ``F.gelu``; the softmax mask is
boolean with True meaning *masked out*, broadcastable to the input, and ``causal``
hides key j from query i when j > i + (k_len - q_len). A row with every key hidden
comes out as zeros (not NaN); a row with a visible +inf or NaN score is NaN, as in
``torch.softmax``.

An op package: ``builders.py``, ``csrc/`` and ``includes/``, the fronts (``norm``,
``residual_norm``, ``gelu``, ``softmax``), and ``selftest.py``. The names are imported on first
use, so that importing the package (op_builder does, for its builders) imports neither torch nor
the fronts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernels._lazy import LazyExports

if TYPE_CHECKING:
    from kernels.transformer.gelu import FusedBiasGelu, bias_gelu
    from kernels.transformer.norm import FusedLayerNorm, layer_norm
    from kernels.transformer.residual_norm import FusedResidualLayerNorm, residual_layer_norm
    from kernels.transformer.softmax import FusedScaledMaskedSoftmax, scaled_masked_softmax

__all__ = [
    "FusedBiasGelu",
    "FusedLayerNorm",
    "FusedResidualLayerNorm",
    "FusedScaledMaskedSoftmax",
    "bias_gelu",
    "layer_norm",
    "residual_layer_norm",
    "scaled_masked_softmax",
]

_EXPORTS = LazyExports(
    __name__,
    {
        "norm": ("FusedLayerNorm", "layer_norm"),
        "residual_norm": ("FusedResidualLayerNorm", "residual_layer_norm"),
        "gelu": ("FusedBiasGelu", "bias_gelu"),
        "softmax": ("FusedScaledMaskedSoftmax", "scaled_masked_softmax"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.get(name)
