"""OCI images in a registry: the manifests and indexes imagegen writes (``manifest``), a small
registry client over the distribution API (``registry``, ``auth``), and the proof documents as
referrers of an image's manifest (``referrers``).
"""
