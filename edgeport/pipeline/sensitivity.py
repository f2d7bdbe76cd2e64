"""``edgeport check MODEL -q int8 --sensitivity``: which layers int8 breaks, before converting anything else.

One export, the parity samples and PyTorch's outputs on them, then per (target, variant) whose layers can stay
float: everything quantized, and each layer quantized alone — the same measurement a failing ``convert`` row
records, without building, judging and timing every artifact.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeport.core.scratch import scratch
from edgeport.errors import UsageError


@dataclass
class SensitivityTable:
    target: str
    variant: str
    scheme: str
    measured: str
    samples: int
    full: dict          # parity with every layer quantized
    layers: list[dict]  # worst first (edgeport.quantize.search.sensitivity)


def sensitivity_tables(source, targets: list[str], variants: list[str], judge, calibration_data: str | None = None,
                       progress=None) -> list[SensitivityTable]:
    """Raises UsageError for bad input (no variant that can keep layers float among those asked for)."""
    from edgeport.config import load_config, parse_budget_flags
    from edgeport.pipeline.plan import check_judge, check_variants, requested_targets, row_policies
    from edgeport.core.proc import redirected

    chosen = requested_targets(targets)
    check_variants(variants, chosen)
    check_judge(judge)
    rows = [(t, v) for t in chosen for v in dict.fromkeys(variants) if t.can_keep_float(v)]
    if not rows:
        raise UsageError("--sensitivity needs a quantized variant whose layers can stay float (-q int8 or "
                         "-q dynamic-int8 on a target that offers it)")
    config, flags = load_config(judge.config), parse_budget_flags(judge.budgets)
    policies = row_policies([(t.name, v) for t, v in rows], config, flags, generative=False)
    with redirected():
        session = _session(source, judge, calibration_data, progress or (lambda _m: None))
        return [_table(t, v, session, policies[(t.name, v)].budget) for t, v in rows]


def _session(source, judge, calibration_data, progress):
    from edgeport.core.program import signature_of
    from edgeport.pipeline.run import load_and_export
    from edgeport.pipeline.session import Session
    from edgeport.validate.data import load_data

    loaded, program, module_rewrites = load_and_export(source, lambda _m: None, {})  # honours --dynamic
    signature = signature_of(program, loaded.input_names)
    calibration = load_data(calibration_data, signature, "--calibration-data") if calibration_data else None
    return Session.start(loaded, program, signature, judge, progress, module_rewrites=tuple(module_rewrites),
                         calibration=calibration)


def _table(target, variant: str, session, budget: dict) -> SensitivityTable:
    from edgeport.quantize.search import SENSITIVITY_SAMPLES, sensitivity
    from edgeport.validate.parity import compare

    names = [o.name for o in session.signature.outputs]
    with scratch("edgeport-sensitivity-") as tmp:
        job = session.convert_job(target, variant, tmp, budget)
        quantizer = target.float_fallback.prepare(job)
        try:
            full = compare(session.reference, quantizer.run(session.samples), budget, names)
            ranked = sensitivity(quantizer, session.samples, session.reference, budget, names)
        finally:
            quantizer.close()
    return SensitivityTable(target.name, variant, target.float_fallback.variants[variant], quantizer.measured,
                            min(len(session.samples), SENSITIVITY_SAMPLES), full, ranked)
