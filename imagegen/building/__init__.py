"""Floor 4, what a build is made from: the project's inputs (``build_inputs``), the build
context (``staging``), the bases (``bases``; the local stand-ins, ``standins``) and the build's
secrets (``build_secrets``). The engine that builds is the ground floor's (``imagegen.engine``)."""
