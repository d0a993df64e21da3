"""Floor 1, the spec: what to build, checked before anything runs.

``spec`` (``ImageSpec`` and ``build_spec``), ``checks`` (one check per option), ``inputs`` and
``given_values`` (files, folders and values from the command line), ``catalog`` and
``catalog_table`` (targets, torch releases, bases), ``torch_releases`` and ``default_holds``
(which torch a target takes), ``compile_cache`` (the shared compile cache's address),
``op_packages`` (op packages outside this distribution) and ``reference`` (image references in
Docker's grammar).
"""
