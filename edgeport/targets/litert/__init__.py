"""LiteRT (.tflite): litert-torch conversion, its quantizers, generation, ai-edge-litert runners, the web sample."""
