"""Compiled op modules land here in an ahead-of-time build, beside ``manifest.json``."""
