"""Readers of model files handed to edgeport, each checking its input before anything in it can run."""
