"""The operators, one op package per family: ``optim``, ``aio``, ``quantization``, ``transformer``.

Each family folder holds its builders (``builders.py``, which op_builder imports to find our
ops), its C++ / CUDA sources (``csrc/``, ``includes/``; headers several families share are in
``kernels/includes``), its Python fronts and its self-test (``selftest.py``). A front loads its
compiled op through ``op_builder`` on first use and falls back to a pure-PyTorch implementation
(warning once, with the reason) when the op cannot load.
"""
