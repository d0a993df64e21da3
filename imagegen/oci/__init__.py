"""Floor 6, publishing images and their proof: cosign's bundles and legacy tags
(``cosign_bundles``, ``cosign_tags``), the push plan and the one place that pushes
(``push_plan``, ``publish``), and a pulled image's proof (``pulled_proof``), each speaking to the
registry through the client of the floor below (``imagegen.registry``).
"""
