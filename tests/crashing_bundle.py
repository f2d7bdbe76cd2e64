"""A bundle runtime (the interface of edgeport.targets.litert.litertlm) whose engine aborts the process while
generating, as LiteRT-LM's engine did on a tiny Llama with a small BPE tokenizer (a Rust panic: "thread caused
non-unwinding panic. aborting.", exit 134): what the bundle judge must survive."""

import os
from pathlib import Path
from types import SimpleNamespace

JUDGED_BY = "crashing.Engine (test)"


def model_dir(layout: dict) -> Path:
    return Path(layout["model"].removeprefix("hf:"))


def tokenizer_dir(model: Path, artifact: Path) -> Path:
    return model


def load_tokenizer(where: Path):
    return SimpleNamespace(decode=lambda ids, **_: " ".join(map(str, ids)))


def open_engine(artifact: Path, threads: int):
    return SimpleNamespace(mode=Path(artifact).read_text().strip())


def engine_prompts(engine, tokenizer, prompts, room):
    return [tokenizer.decode(p) for p in prompts], [list(p) for p in prompts], 0


def piece_ids(tokenizer) -> dict:
    return {}


def run_text(engine, text: str, max_new: int):
    if engine.mode == "abort":
        os.abort()
    raise ValueError(f"engine refused {text!r}")
