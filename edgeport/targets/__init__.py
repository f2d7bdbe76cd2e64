"""torch.export front end and one module per deployment target (see registry.py)."""
