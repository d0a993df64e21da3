"""Floor 6, the doctor: whether this machine can build and verify images (``diagnosis``)."""
