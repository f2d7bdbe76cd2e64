"""Does it still compute the same? (issue 35 item 4) The bf16 TPU artifact (the deployment dtype) against
PyTorch eager in fp32 AND in bf16 on the same samples, plus eager bf16 against eager fp32.

Why three numbers: the row's parity says how far the TPU's bf16 is from the fp32 model, but a team serving
bf16 on GPUs today already pays bf16's error; what switching hardware costs is the TPU's distance from the
bf16 model they run now, beside the distance bf16 itself puts between them and fp32.
"""

from __future__ import annotations

from pathlib import Path

KEYS = ("max_abs_err", "max_rel_err", "cosine_min", "snr_db_min")


def bf16_parity(job, artifact_dir: Path) -> dict | None:
    """The three comparisons for a bf16 forward row (None for other variants, or without samples)."""
    import torch

    from edgeport.targets.tpu.runtime import JaxXlaRunner
    from edgeport.validate import parity

    samples = job.samples or job.calibration_samples()
    if job.variant != "bf16" or not samples:
        return None
    names = [o.name for o in job.signature.outputs]
    fp32 = [_eager(job.program, s, torch.float32) for s in samples]
    bf16 = [_eager(job.program, s, torch.bfloat16) for s in samples]
    runner = JaxXlaRunner(artifact_dir, 1)
    tpu = [[_float(x) for x in runner.run(s)] for s in samples]
    budget = parity.BF16

    def metrics(reference, actual):
        result = parity.compare(reference, actual, budget, names)
        worst = {k: [o.get(k) for o in result["outputs"] if o.get(k) is not None] for k in KEYS}
        return {k: (min(v) if k in ("cosine_min", "snr_db_min") else max(v)) if v else None for k, v in worst.items()}

    return {"samples": len(samples), "tpu_bf16_vs_eager_fp32": metrics(fp32, tpu),
            "tpu_bf16_vs_eager_bf16": metrics(bf16, tpu), "eager_bf16_vs_eager_fp32": metrics(fp32, bf16),
            "note": "the TPU artifact's CPU lowering (the same StableHLO a TPU compiles); eager bf16 = the module's "
                    "weights and floating inputs cast to bfloat16"}


def _eager(program, sample, dtype) -> list:
    import copy

    import torch

    inputs = [torch.as_tensor(x) for x in sample]
    # a copy before the cast: Module.to() casts parameters in place, and they are the program's own tensors
    module = program.module() if dtype == torch.float32 else copy.deepcopy(program).module().to(dtype)
    if dtype != torch.float32:
        inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = module(*inputs)
    out = out if isinstance(out, (list, tuple)) else [out]
    return [_float(o.detach().float().numpy()) for o in out]


def _float(x):
    import numpy as np

    return np.asarray(x, dtype=np.float32) if np.issubdtype(np.asarray(x).dtype, np.floating) else np.asarray(x)


def sections(row: dict) -> list:
    from edgeport.validate.render import fmt
    from edgeport.validate.sections import ReportSection

    block = row.get("bf16_parity")
    if not block:
        return []
    label = {"tpu_bf16_vs_eager_fp32": "TPU bf16 vs PyTorch fp32", "tpu_bf16_vs_eager_bf16": "TPU bf16 vs PyTorch bf16",
             "eager_bf16_vs_eager_fp32": "PyTorch bf16 vs PyTorch fp32"}
    rows = [[label[k], *(fmt(block[k].get(m), ".3g") for m in KEYS)] for k in label]
    return [ReportSection("tpu_bf16_parity", "Does the TPU still compute the same? bf16 (the deployment dtype) against "
                          "PyTorch fp32 and bf16 on the same samples", ("comparison", *KEYS), rows)]
