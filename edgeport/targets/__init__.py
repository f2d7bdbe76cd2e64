"""The target layer: one package per target (``targets/<name>/``), each holding everything about it."""
