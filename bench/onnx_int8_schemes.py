"""Which onnxruntime int8 scheme keeps an LLM close to its fp32 self (issue 37): re-quantizes the fp32 ONNX
graphs of a finished `bench/llm_quality.py -t onnx` run several ways and teacher-forces each against the fp32
artifact over the same text (the run's layout, its tokenizer, Python's help topics), as the quality block does.

    python bench/llm_quality.py -t onnx -q dynamic-int8 --out DIR      # once: the fp32 graphs
    python bench/onnx_int8_schemes.py DIR per-tensor per-channel prefill-only decode-only nbits8-64

Schemes: quantize_dynamic per-tensor / per-channel (portable kernels: uint8 activations, 7-bit weights);
prefill-only / decode-only (per-channel, the other graph left fp32: where the error comes from);
nbits<bits>-<block> (MatMulNBits, symmetric; 8 bits with int8 compute, accuracy_level 4).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's edgeport


def quantize(scheme: str, src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from edgeport.targets.onnx import nbits

    for graph in src.glob("*.onnx"):
        only = {"prefill-only": "prefill", "decode-only": "decode"}.get(scheme)
        if only and not graph.stem.startswith(only):
            _copy(graph, dst / graph.name)
        elif scheme.startswith("nbits"):
            bits, block = (int(x) for x in scheme.removeprefix("nbits").split("-"))
            acc = {"accuracy_level": 4} if bits == 8 else {}
            nbits.quantize_nbits(graph, dst / graph.name, {**nbits.INT4, "bits": bits, "block_size": block, **acc})
        else:
            quantize_dynamic(str(graph), str(dst / graph.name), weight_type=QuantType.QInt8, reduce_range=True,
                             per_channel=scheme != "per-tensor", op_types_to_quantize=["MatMul", "Gemm"],
                             use_external_data_format=True)


def _copy(graph: Path, dst: Path) -> None:
    import onnx

    onnx.save(onnx.load(str(graph)), str(dst), save_as_external_data=True, location=dst.name + ".data")


def main(out: Path, schemes: list[str]) -> None:
    import pydoc_data.topics
    from transformers import AutoTokenizer

    from edgeport.pipeline.tasks.text_generation.directory import read_layout
    from edgeport.pipeline.tasks.text_generation.quality import teacher_forced, windows_of
    from edgeport.targets.onnx.signatures import OnnxSignatureRunner
    from edgeport.validate.distribution import distribution_metrics

    layout = read_layout(out)
    fp32 = out / "onnx" / "generate_fp32"
    text = "\n".join(list(pydoc_data.topics.topics.values())[:5])   # the quality block's first 128 tokens too
    ids = AutoTokenizer.from_pretrained(str(out / "tokenizer"))(text)["input_ids"]
    context, windows = windows_of(ids, layout, 128)

    def forced(path: Path) -> np.ndarray:
        runner = OnnxSignatureRunner(path, 2)
        return np.concatenate([teacher_forced(runner, layout, w, context) for w in windows])

    ref, targets = forced(fp32), np.concatenate([np.array(w[context:]) for w in windows])
    for scheme in schemes:
        dst = Path(tempfile.mkdtemp(prefix=f"scheme-{scheme}-"))
        try:
            quantize(scheme, fp32, dst)
            m = distribution_metrics(ref, forced(dst), targets)
            size = sum(p.stat().st_size for p in dst.iterdir())
            print(f"{scheme} | {m['kld_mean']:.4f} | {m['kld_p99']:.3f} | {100 * m['top1_agreement']:.1f}% | "
                  f"{m['ppl']:.2f} ({m['ppl_reference']:.2f}) | {size / 1e6:.0f} MB", flush=True)
        finally:
            shutil.rmtree(dst, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
