"""manifest.json for a generative model: the forward manifest's fields (schema ``edgeport.manifest/1``,
so existing readers keep working; the top-level inputs/outputs are decode's) plus a ``generation`` section
with everything an app needs to drive the artifacts:

- ``signatures``: each signature's inputs and outputs as the exported program has them (roles, shapes, dtypes);
- ``artifacts``: per target x variant, the path (sha256, size, which path built it: ``built_by``; a
  ``.litertlm`` bundle is one of them), ``files`` (every file it consists of, tokenizer included) and each
  signature's I/O as its runtime sees it (names, runtime dtypes; each output's ``role`` says which input it
  feeds on the next call); a bundle an engine drives by text (``.litertlm``) has a ``text_sample`` instead:
  prompts as text, PyTorch's tokens as pieces;
- ``cache``: the cache tensors (layer, key/value/length, shape, dtype) and ``cache_len``;
- ``eos_token_ids``, ``bos_token_id``, ``vocab_size``, ``prefill_lens``, how to feed each role (``feeding``);
- ``parity_sample``: the judged prompts' ids and the reference's greedy tokens, so an app can check itself;
- ``tokenizer``: the folder with the tokenizer files copied from the model, when it had them.
"""

from __future__ import annotations

from pathlib import Path

from edgeport import __version__

FEEDING = {
    "roles": "each signature input is fed by its role (an input's role, else its name): input_ids, position_ids, "
             "attention_mask*, cache_k_<l>/cache_v_<l>, cache_len_<l>; each output's role names the input it feeds "
             "next; integers and masks in the dtype and shape the signature declares.",
    "prefill_<L>": "input_ids (1, L) right-padded with 0; position_ids 0..L-1; cache_len_<l> 0 (prompt_len, when "
                   "present, = the real prompt length); a mask: row i allows slots 0..i. Then set every "
                   "cache_len_<l> output to the real prompt length before the first decode. A prefill whose "
                   "logits hold one row (1, 1, V) for L > 1 answers its highest position: its padding rows repeat "
                   "the last real position (0, 1, .., n - 1, n - 1, ..) and its cache inputs start as zeros. A "
                   "prefill with no logits output takes only the prompt's first n - 1 tokens (for n = 1 no "
                   "prefill runs: every cache starts as zeros), right-padded into the same L; the last token then "
                   "goes through one decode step at position n - 1, whose logits give the first new token.",
    "decode": "input_ids (1, 1) = the last token; position_ids = its position pos; each attention_mask* "
              "(1, 1, 1, S) True (or 0.0 for a float mask, float32's lowest number elsewhere) on slots "
              "0..min(pos, S - 1), S its last dimension: C, or a sliding layer's ring of W slots (written at "
              "pos % W); the cache outputs of the previous call.",
    "greedy": "next token = argmax of logits (prefill: row len(prompt) - 1, or its one row); stop at an eos id or a "
              "full cache.",
}


def generation_manifest(spec: str, session, rows: list[dict], out_dir: Path) -> dict:
    from edgeport.validate.report import file_list

    layout = session.layout
    decode = layout.signatures["decode"]
    artifacts = [{"target": r["target"], "variant": r["variant"], "path": r["artifact"], "status": r["status"],
                  **file_list(r), "built_by": r.get("built_by"), "parity_sample": None} for r in rows if r.get("artifact")]
    tokenizer = out_dir / "tokenizer"
    return {
        "schema": "edgeport.manifest/1",
        "edgeport_version": __version__,
        "model": spec,
        "inputs": decode["inputs"],
        "outputs": decode["outputs"],
        "artifacts": artifacts,
        "generation": {
            "task": "text-generation", "architecture": layout.architecture, "vocab_size": layout.vocab_size,
            "num_layers": layout.num_layers, "cache_len": layout.cache_len, "prefill_lens": layout.prefill_lens,
            "bos_token_id": layout.bos_token_id, "eos_token_ids": layout.eos_token_ids, "cache": layout.cache,
            "signatures": layout.signatures, "feeding": FEEDING,
            "artifacts": [{"target": r["target"], "variant": r["variant"], "path": r["artifact"], "status": r["status"],
                           **file_list(r), "built_by": r.get("built_by"), "signatures": r.get("signatures"),
                           "text_sample": (r.get("generation") or {}).get("text_sample"),
                           "quality": quality_summary(r)}
                          for r in rows if r.get("artifact")],
            "parity_sample": parity_sample(session),
            "tokenizer": "tokenizer" if tokenizer.is_dir() else None,
        },
    }


def parity_sample(session) -> dict:
    return {"reference": session.reference_source, "new_tokens": session.layout.gen_tokens,
            "prompts": [{"prompt_ids": list(p), "tokens": list(r.tokens)} for p, r in zip(session.prompts, session.reference)]}


QUALITY_FIELDS = ("text", "tokens", "kld_mean", "kld_p99", "top1_agreement", "ppl_reference", "ppl", "delta_ppl")


def quality_summary(row: dict) -> dict | None:
    """What an app screen shows of the row's judged quality: the teacher-forced numbers on real text vs PyTorch
    fp32 (no per-token list) and the task checks' pass counts; None when neither was measured."""
    quality, checks = row.get("quality"), row.get("checks")
    if not quality and not checks:
        return None
    out = {k: quality[k] for k in QUALITY_FIELDS if k in quality} if quality else {}
    if checks:
        out["checks"] = {k: checks[k] for k in ("total", "passed", "reference_passed")}
    return out
