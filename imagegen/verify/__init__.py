"""Floor 5, verification: every op of a built image self-tested and audited in a sealed
container (``container``; the sealed run itself is the engine's, ``imagegen.engine.sealed``),
why it could not be (``failures``), and the table of results (``table``)."""
