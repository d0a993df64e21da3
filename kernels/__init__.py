"""The operators: C++ / CUDA sources under ``csrc/`` and the Python fronts users call.

Each front loads its compiled op through ``op_builder`` on first use and falls
back to a pure-PyTorch implementation (warning once, with the reason) when the
op cannot load.
"""
