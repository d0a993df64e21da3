"""Stage 4, verification: every op of a built image self-tested and audited in a sealed
container (``image``), why it could not be (``errors``), and the table of results (``table``)."""
