"""Module passes: exact re-selections of an implementation on the eager model, before the one export."""

from __future__ import annotations

from edgeport.targets.rewrites.registry import MODULE_REWRITES, module_rewrite


@module_rewrite("batched_experts")
def batched_experts(module) -> bool:
    """Hugging Face MoE layers default to grouped-mm experts: ``aten.histc`` for token counts and the
    ``transformers::grouped_mm_fallback`` custom op with a data-dependent loop (fails on LiteRT, TPU and
    ONNX). The "batched_mm" experts implementation is the same math with static shapes; "eager" is not
    exportable (data-dependent expert loop)."""
    experts = [m for m in module.modules() if hasattr(m, "_is_expert_parallel") and hasattr(m, "config")]
    if not experts or all(m.config._experts_implementation == "batched_mm" for m in experts):
        return False
    owner = next((m for m in module.modules() if hasattr(m, "set_experts_implementation")), None)
    if owner is None:
        return False
    try:
        owner.set_experts_implementation("batched_mm")
    except Exception:  # an experts class that does not offer batched_mm: leave it, histc_onehot may still help
        return False
    return all(m.config._experts_implementation == "batched_mm" for m in experts)



def apply_module_rewrites(module) -> list[str]:
    """Module passes are exact re-selections of an implementation, so they run for every target."""
    if module is None:
        return []
    return [name for name, rewrite in MODULE_REWRITES.items() if rewrite(module)]
