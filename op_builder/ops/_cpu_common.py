"""What every OpenMP CPU op shares."""

from __future__ import annotations

# -fopenmp links GCC's OpenMP runtime, which slim runtime images may lack.
OPENMP_RUNTIME_PACKAGES = ("libgomp1",)
