"""The prompts artifacts are judged on: seeded random ids spread over the prefill lengths, plus real
prompts from ``--data``.

``--samples N`` is the number of random prompts, spread round-robin over the prefill lengths; every other
prompt of a length is shorter than it (but longer than the next shorter length), so the right-padded path
every app takes with a short prompt is judged too. Real prompts: ``.npy``/``.npz``/a directory of them
(1-D token ids, or 2-D rows of ids), ``file.py:fn`` yielding id sequences, or a ``.txt`` file with one text
prompt per line, tokenized with the model's tokenizer. They are read with the same caps and no-pickle rules
as forward ``--data``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeport.errors import UsageError
from edgeport.pipeline.tasks.text_generation.layout import Layout
from edgeport.pipeline.tasks.text_generation.loop import check_fits


def random_prompts(layout: Layout, count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    low = 3 if layout.vocab_size > 8 else 0  # clear of the usual pad/bos/eos ids when the vocabulary allows
    lens = layout.prefill_lens
    prompts = []
    for i in range(count):
        index, round_ = i % len(lens), i // len(lens)
        shortest = lens[index - 1] + 1 if index else 1
        length = lens[index]
        if round_ % 2 == 1 and shortest < length:
            length = int(rng.integers(shortest, length))
        prompts.append([int(t) for t in rng.integers(low, layout.vocab_size, length)])
    return prompts


def read_prompts(path_text: str, layout: Layout, tokenizer_dir: Path | None) -> tuple[list[list[int]], dict]:
    """Real prompts (checked: ids inside the vocabulary, each fitting the cache with --gen-tokens more) and
    the report's data block."""
    if path_text.endswith(".txt"):
        prompts, kind, available = _text_prompts(Path(path_text), tokenizer_dir), "text", None
    else:
        from edgeport.core.program import TensorInfo
        from edgeport.core.program import Signature
        from edgeport.validate.data import read_data

        signature = Signature((TensorInfo("input_ids", (-1,), "int64"),), ())
        data = read_data(path_text, signature)
        prompts = [[int(t) for t in np.asarray(s[0]).reshape(-1)] for s in data.samples]
        kind, available = data.kind, data.available
    for n, prompt in enumerate(prompts):
        check_prompt(prompt, layout, f"--data prompt {n}")
    block = {"kind": kind, "source": path_text, "samples": len(prompts), "samples_used": len(prompts),
             "samples_available": available if available is not None else len(prompts)}
    return prompts, block


def _text_prompts(path: Path, tokenizer_dir: Path | None) -> list[list[int]]:
    from edgeport.validate.data import MAX_DATA_SAMPLES

    if not path.is_file():
        raise UsageError(f"--data not found: {path}")
    tokenizer = load_tokenizer(tokenizer_dir, "--data with text prompts")
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()][:MAX_DATA_SAMPLES]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --data {path}: {exc}") from exc
    if not lines:
        raise UsageError(f"--data {path} holds no prompt lines")
    return [list(tokenizer(line)["input_ids"]) for line in lines]


def load_tokenizer(directory: Path | None, what: str):
    if directory is None or not directory.is_dir() or not any(directory.iterdir()):
        raise UsageError(f"{what} needs the model's tokenizer, and {directory} holds none (the model directory had "
                         "no tokenizer files)")
    from edgeport.sources.hf_declared import check_documents

    check_documents(str(directory))  # its *.json depth-bounded before transformers parses them
    try:
        from transformers import AutoTokenizer

        # the folder is data from DIR: its auto_map / custom classes never run (False, not None: None asks
        # on stdin, and a "y" there would run the folder's Python)
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        from edgeport.diagnostics import first_line

        raise UsageError(f"cannot load the tokenizer in {directory}: {first_line(exc)}") from exc


def check_prompt(prompt: list[int], layout: Layout, label: str, new_tokens: int | None = None) -> None:
    """Ids inside the vocabulary and a prompt the cache can hold with the new tokens: else exit 2."""
    bad = next((t for t in prompt if not 0 <= t < layout.vocab_size), None)
    if bad is not None:
        raise UsageError(f"{label}: token id {bad} is outside the vocabulary (0..{layout.vocab_size - 1})")
    problem = check_fits(layout, len(prompt), layout.gen_tokens if new_tokens is None else new_tokens)
    if problem:
        raise UsageError(f"{label}: {problem}")
