"""ONNX: the torch.onnx dynamo exporter, onnxruntime quantization and runners."""
