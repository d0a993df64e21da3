"""What the builders of our op families share: the OpenMP runtime package, the shared headers."""

from __future__ import annotations

# -fopenmp links GCC's OpenMP runtime, which slim runtime images may lack.
OPENMP_RUNTIME_PACKAGES = ("libgomp1",)

# Headers used by more than one family: kernels/includes, beside the family folders. Every
# builder of ours adds it after its own includes/.
INCLUDE_DIRS = ("includes", "../includes")
