"""Other libraries' names and conventions over our ops, so their users switch by one import line.

``kernels.compat.deepspeed``: DeepSpeed's optimizers (``DeepSpeedCPUAdam``, ``FusedAdam``, ...)
with DeepSpeed's signatures, over ``kernels.optim``. docs/deepspeed.md lists what differs.
"""
