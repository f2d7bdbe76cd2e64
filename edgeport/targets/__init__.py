"""The target layer: what a target is (base.py), which exist (registry.py), the rewrites they may ask for
(rewrites/), and one package per target holding everything about it."""
