"""Where the distribution's files are: a leaf module every other one may import.

``PACKAGE_ROOT`` holds ``op_builder/`` and ``kernels/`` side by side, in a checkout and in an
installed wheel (our ops' sources ship as package data in their folders under ``kernels/``).
``SHARED_INCLUDE_DIR`` is the folder of the headers every op's binding may use, ours and op
packages' alike.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
MANIFEST_RELPATH = Path("kernels", "_ops", "manifest.json")

# The headers a binding is written against once for both of torch's ABIs (op_abi.h, op_tensors.h,
# shape_text.h; gpu_bindings.h for a GPU op's device guard and current stream): kernels/includes.
# They ship wherever op_builder does (the wheel's package data, an image's build stage),
# so an op package names this folder in its builder's include_dirs rather than copying the
# headers, and op_sources accepts it there although it lies outside the package. A str, as
# include_dirs entries are.
SHARED_INCLUDE_DIR = str(PACKAGE_ROOT / "kernels" / "includes")
