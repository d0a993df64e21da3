"""``python -m imagegen``."""

from imagegen.cli import main

main()
