"""Floor 7, the doctor: whether this machine can build and verify images (``diagnosis``)."""
