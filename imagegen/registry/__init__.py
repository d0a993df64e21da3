"""Floor 2, a registry spoken to over the OCI distribution API: the client (``distribution``:
references, manifests, blobs, the registry's hosts by policy), its credentials (``auth``), the
manifests and indexes imagegen writes as exact bytes (``manifest``) and the documents attached to
an image's manifest as referrers (``referrers``). It knows nothing of images being built or
proven: publishing them is the floor above's (``imagegen.oci``)."""
