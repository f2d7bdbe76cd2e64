"""The conversion pipeline: plan (checks before work) -> session (export once, samples, reference) -> one
row per target x variant (convert -> judge -> localize -> parity sample) -> report."""
