"""The exported program -> ``DIR/executorch/model_<variant>.pte``: fp32 lowered as it is, int8 through
PT2E first (:mod:`.quantize`); the row's ``delegation`` block says what XNNPACK took (:mod:`.delegation`)."""

from __future__ import annotations

from edgeport.targets.base import ConvertJob, Converted
from edgeport.validate.sections import ReportSection
from edgeport.targets.executorch.delegation import summary
from edgeport.targets.executorch.lower import lower, save, weights_on_disk
from edgeport.targets.executorch.quantize import quantized_program


def convert(job: ConvertJob) -> Converted:
    if job.variant == "int8":
        job.progress("quantization (PT2E int8)")
    program, on_purpose = quantized_program(job) if job.variant == "int8" else (job.program, [])
    path = job.out_dir / f"model_{job.variant}.pte"
    with weights_on_disk(job.out_dir, {"forward": program}):
        job.progress("lowering (XNNPACK)")
        edge = lower({"forward": program})
        details = {"delegation": summary(edge), **({"quantization": {"float_on_purpose": on_purpose}} if on_purpose else {})}
        job.progress("serialization")
        data = save(edge, path)
    return Converted(path, details, files=[data] if data is not None else [])


def report_sections(row: dict) -> list[ReportSection]:
    """One table for every ExecuTorch row: how much of the model XNNPACK runs, and what it leaves; the time
    share (measured, ``op_time``) beside the FLOPs share, which can hide slow ops outside the delegate."""
    block = row.get("delegation")
    if not block:
        return []
    share = lambda v: "–" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    timed = row.get("op_time") or {}
    left = ", ".join(f"{op} x{n}" + (f" {timed['portable'][_short(op)]:.3f} ms" if _short(op) in timed.get("portable", {}) else "")
                     for op, n in block["portable_ops"].items()) or "none"
    return [ReportSection("executorch-delegation", "ExecuTorch delegation (XNNPACK vs portable kernels)",
                          ("variant", "nodes delegated", "FLOPs delegated", "time delegated", "partitions",
                           "ops on portable kernels"),
                          [[row.get("variant", "?"), f"{block['nodes_delegated']}/{block['nodes']} ({share(block['node_share'])})",
                            share(block["flops_share"]), share(timed.get("time_share")), str(block["partitions"]), left]])]


def _short(op: str) -> str:
    """``aten.cumsum.default`` -> ``cumsum.out``: the name ExecuTorch's profiler gives the portable kernel."""
    return op.split(".", 1)[-1].rsplit(".", 1)[0] + ".out"
