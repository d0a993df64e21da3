"""The compatibility check: every op's host code against every torch minor the catalog admits.

``headers`` reads torch's headers out of its wheels, ``host`` compiles the ops' host code
against them, ``device`` compiles the device code with each toolkit that can be had here, and
``results`` keeps what was found (``imagegen/data/compat.json``) and renders it for the docs
and ``imagegen catalog``.
"""
