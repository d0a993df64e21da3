"""Write the tables of environment variables into the README and docs/imagegen.md.

    .venv/bin/python scripts/settings_tables.py

The tables come from ``op_builder.settings`` and ``imagegen.settings``, and the options table of
docs/imagegen.md from ``imagegen.options``; tests/unit/test_settings_tables.py fails while a page
differs from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagegen import options  # noqa: E402
from imagegen import settings as imagegen_settings  # noqa: E402
from op_builder import settings  # noqa: E402

# (page, the heading its table sits under, the table)
PAGES = (
    ("README.md", "## Environment variables", settings.markdown_table()),
    ("docs/imagegen.md", "## Environment variables", imagegen_settings.markdown_table()),
    ("docs/imagegen.md", options.DOCS_HEADING, options.markdown_table()),
)


def main() -> int:
    for page, heading, table in PAGES:
        path = REPO / page
        text = path.read_text()
        new = settings.with_table(text, heading, table)
        if new != text:
            path.write_text(new)
            print(f"updated {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
