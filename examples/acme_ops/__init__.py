"""acme_ops: an example op package, RMSNorm on the CPU (``acme_rmsnorm``) and on CUDA
(``acme_rmsnorm_cuda``), and the tutorial of docs/op-packages.md.

Call it through the front: ``from acme_ops.rmsnorm import rms_norm``. This file imports
nothing: op_builder imports ``acme_ops.builders`` to discover the ops, wherever they are
listed (``imagegen ops``, a Dockerfile render), and that must not need torch.
"""
