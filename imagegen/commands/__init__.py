"""One module per ``imagegen`` command; ``imagegen.cli`` composes them.

The ``_``-modules are the commands' shared parts (options, output, spec from options) and
are imported only from this package; ``imagegen.cli`` gets what it needs of them here.
"""

from __future__ import annotations

from imagegen.commands._options import JSON_META_KEY
from imagegen.commands._output import report_error

__all__ = ["JSON_META_KEY", "report_error"]
