"""Floor 7, the runs: what a command asks for, done from start to end. Each takes frozen specs,
one push plan (``imagegen.oci.push_plan``) and an optional signer, and ends every image it made
with the one finish sequence (``finish``: seal -> size -> verify -> push):

- ``pipeline``: one image, ``build(spec) -> ImageReport``;
- ``multiarch``: one image per platform, then the index over them;
- ``bake``: the matrix's targets through ``docker buildx bake`` (its inputs: ``bake_inputs``);
- ``report``: what each returns: one image's report, and the run's, whose JSON is every
  ``--json`` of ``imagegen build`` and ``imagegen bake``, in one shape.
"""
