"""What an image carries as its proof: what it holds, where it came from, and how large each part is."""
