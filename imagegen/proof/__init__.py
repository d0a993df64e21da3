"""Floor 5, what an image carries as its proof: what it holds, where it came from, whether it is
the image that was signed, and how large each part and layer is."""
