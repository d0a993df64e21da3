"""Stage 3, the build: the project's inputs (``sources``), the build context (``staging``), the
bases (``bases``, ``standins``) and the container engine that builds (``engine``)."""
