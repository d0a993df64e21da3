"""Floor 3, rendering: the spec as a Dockerfile (``dockerfile``, from ``templates/``) and the
matrix of specs as a bake file (``matrix``)."""
