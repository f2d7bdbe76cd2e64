"""ExecuTorch (.pte): the XNNPACK-delegated lowering, PT2E int8, generation, executorch.runtime runners."""
