"""Stage 1, the spec: what to build, checked before anything runs.

``image`` (``ImageSpec`` and ``build_spec``), ``checks`` (one check per option), ``inputs``
(files, folders and values from the command line), ``catalog`` (targets, torch releases, bases),
``standin_catalog`` (the local stand-ins of the bases), ``op_packages`` (op packages outside
this distribution) and ``reference`` (image references in Docker's grammar).
"""
