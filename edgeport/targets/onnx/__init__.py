"""ONNX: the torch.onnx dynamo exporter, onnxruntime quantization and runners."""

import os

# onnxruntime (1.32 on Linux) records telemetry when imported: a device id and an event database in
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime/ and a session file in $TMPDIR. A conversion gate writes
# nothing outside --out, so it is off unless the user chose otherwise.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
