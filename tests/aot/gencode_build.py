"""Build the device code of several GPU ops in ONE setuptools run, in the order given,
through torch's BuildExtension with the op builder's per-op flags. Prints the build log
(torch runs ninja verbosely, so every nvcc command line is in it).

Only the .cu sources are compiled: they include CUDA and project headers only, so the
local toolkit builds them even where torch is a CPU build (see DESIGN.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from op_builder import get_builder
from op_builder.context import resolve_context
from op_builder.paths import PACKAGE_ROOT
from op_builder.toolchain import probe


def main() -> None:
    out, names = Path(sys.argv[1]), sys.argv[2:]
    ctx = resolve_context(os.environ, probe(os.environ))
    extensions = []
    for name in names:
        ext = get_builder(name).extension(ctx)
        ext.sources = [s for s in ext.sources if s.endswith(".cu")]
        # Device code only: a CPU torch has no c10_cuda / torch_cuda to link against.
        ext.libraries = [lib for lib in ext.libraries if lib not in ("c10_cuda", "torch_cuda")]
        extensions.append(ext)
    os.chdir(PACKAGE_ROOT)  # setuptools resolves the relative source paths from here
    setup(
        name="gencode-check",
        ext_modules=extensions,
        cmdclass={"build_ext": BuildExtension},
        script_args=["build_ext", "--build-temp", str(out / "temp"), "--build-lib", str(out / "lib")],
    )


if __name__ == "__main__":
    main()
