"""LiteRT (.tflite): litert-torch conversion, its quantizers, generation, ai-edge-litert runners, the web sample."""

# fp32 weights above which litert-torch converts "lightweight" (constants handled lazily, then folded by its
# runtime): on a 2.24 GB model its peak over the weights fell from 2.7x to 1.8x and the conversion took half
# the time, same parity (bench/LARGE.md); smaller models keep the default path their tests pin. The forward
# conversion (target.py) and export_hf (hf_lowering.py) both use it.
LIGHTWEIGHT_ABOVE = 1 << 30


def over_lightweight_threshold(program) -> bool:
    """The program's fp32 weights exceed :data:`LIGHTWEIGHT_ABOVE` (one test for both conversions)."""
    from edgeport.core.memory import program_weight_bytes

    return program is not None and program_weight_bytes(program) > LIGHTWEIGHT_ABOVE
