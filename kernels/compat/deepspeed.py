"""DeepSpeed's optimizer API over our ops: change one import line, keep the training code.

    from deepspeed.ops.adam import DeepSpeedCPUAdam          # before
    from kernels.compat.deepspeed import DeepSpeedCPUAdam    # after

| DeepSpeed                                  | here, over                                     |
|--------------------------------------------|------------------------------------------------|
| ``deepspeed.ops.adam.DeepSpeedCPUAdam``     | ``kernels.optim.CPUAdam``                      |
| ``deepspeed.ops.adagrad.DeepSpeedCPUAdagrad`` | ``kernels.optim.CPUAdagrad``                 |
| ``deepspeed.ops.lion.DeepSpeedCPULion``     | ``kernels.optim.CPULion``                      |
| ``deepspeed.ops.adam.FusedAdam``            | ``kernels.optim.FusedAdam``                    |
| ``deepspeed.ops.lion.FusedLion``            | ``kernels.optim.FusedLion``                    |
| ``deepspeed.ops.lamb.FusedLamb``            | ``kernels.optim.FusedLamb``, DeepSpeed's rule  |
| ``AsyncIOBuilder().load().aio_handle``      | ``kernels.aio.handle.AIOHandle``               |
| ``deepspeed.ops.quantizer.ds_quantizer``    | DeepSpeed's fake-quantization grid, in PyTorch |
| ``deepspeed.ops.fp_quantizer.FP_Quantize``  | DeepSpeed's FP8/12/6/4 formats, in PyTorch     |
| ``deepspeed.linear.QuantizationConfig``     | the config ``FP_Quantize`` takes               |

Constructors take DeepSpeed's arguments, in its order, with its defaults; ``step`` and the
sub-group API follow DeepSpeed's conventions. Every class is a subclass of ours and a
``torch.optim.Optimizer``: each op falls back to PyTorch, warning once, when it cannot load.
The quantizers keep DeepSpeed's numerics (its grids, not ``kernels.quantization``'s).
docs/deepspeed.md lists every difference from DeepSpeed and from our native API, and what
DeepSpeed has that this module does not.
"""

from kernels.compat._ds_aio import AsyncIOBuilder
from kernels.compat._ds_cpu import DeepSpeedCPUAdagrad, DeepSpeedCPUAdam, DeepSpeedCPULion
from kernels.compat._ds_fp_quant import FP_Quantize, QuantizationConfig
from kernels.compat._ds_fused import FusedAdam, FusedLion
from kernels.compat._ds_lamb import FusedLamb
from kernels.compat._ds_quant import ds_quantizer

__all__ = [
    "AsyncIOBuilder",
    "DeepSpeedCPUAdagrad",
    "DeepSpeedCPUAdam",
    "DeepSpeedCPULion",
    "FP_Quantize",
    "FusedAdam",
    "FusedLamb",
    "FusedLion",
    "QuantizationConfig",
    "ds_quantizer",
]
