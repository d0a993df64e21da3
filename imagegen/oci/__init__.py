"""Floor 5, OCI images in a registry: the manifests and indexes imagegen writes (``manifest``), a
small registry client over the distribution API (``registry``, ``auth``), the proof documents as
referrers of an image's manifest (``referrers``), cosign's bundles and legacy tags
(``cosign_bundles``, ``cosign_tags``), the push plan and the one place that pushes
(``push_plan``, ``publish``), and a pulled image's proof (``pulled_proof``).
"""
