"""Parity, latency and reports: how edgeport proves an artifact computes what the PyTorch model computes."""
