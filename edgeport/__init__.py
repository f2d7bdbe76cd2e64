"""edgeport: export a PyTorch model once, convert it for each deployment target, prove every artifact."""

__version__ = "0.1.0"
