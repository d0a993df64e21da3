"""Build entry point: one extension per op selected by DS_BUILD_* (none by default).

    DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 pip wheel --no-build-isolation .

Metadata lives in pyproject.toml; this file only adds the planned extensions.
"""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from op_builder.setup_support import needs_extensions, planned_extensions

ext_modules, cmdclass = planned_extensions(os.environ) if needs_extensions(sys.argv) else ([], {})
setup(ext_modules=ext_modules, cmdclass=cmdclass)
