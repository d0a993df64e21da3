"""Build entry point: one extension per op selected by DS_BUILD_* (none by default).

    DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 pip wheel --no-build-isolation .

Metadata lives in pyproject.toml; this file only adds the planned extensions. It is the
entry point pip runs, so it is where an error becomes its message and exit code (2 for a bad
DS_BUILD_* setting), with no traceback.
"""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from op_builder.errors import UserFacingError
from op_builder.setup_support import needs_extensions, planned_extensions, say_error

try:
    ext_modules, cmdclass = planned_extensions(os.environ) if needs_extensions(sys.argv) else ([], {})
except UserFacingError as exc:
    say_error(exc.message, exc.hint)
    sys.exit(exc.exit_code)
setup(ext_modules=ext_modules, cmdclass=cmdclass)
