"""The target-neutral core below everything else: the one torch.export (program.py) and PyTorch eager as a
runner (eager.py)."""
