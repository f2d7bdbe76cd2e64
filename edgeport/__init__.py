"""edgeport: export a PyTorch model once, convert it for each deployment target, prove every artifact."""

__version__ = "0.1.0"

import os as _os

# torch_tpu registers itself as a torch device backend: where it is installed, every `import torch` would
# load it (+5-8 s, libtpu) and without a TPU it can abort the process. edgeport's process runs on CPU;
# TPU work happens in a worker subprocess (edgeport.targets.tpu.device) that imports it explicitly.
_os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
