"""One module per ``imagegen`` command; ``imagegen.cli`` composes them."""
