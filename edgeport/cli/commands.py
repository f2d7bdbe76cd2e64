"""``convert``, ``validate``, ``report`` and ``check``: parse flags, call the library API, print. No logic
of their own."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from edgeport.cli.app import (BASELINE_OPTION, BUDGET_OPTION, CONFIG_OPTION, DATA_OPTION, DECOMPOSITIONS_OPTION, MODEL_ARGUMENT,
                              NO_LATENCY_OPTION, SAMPLES_OPTION, SEED_OPTION, SEQ_LEN_OPTION, THREADS_OPTION,
                              TRUST_PICKLE_OPTION, TRUST_REMOTE_CODE_OPTION, app, native_output_to, parse_threads,
                              with_progress, with_target_options)
from edgeport.cli.summary import print_findings, print_sensitivity, print_summary
from edgeport.pipeline.run import RUN_LOG
from edgeport.targets.registry import DEFAULT_TARGET


EVAL_TEXT_OPTION = typer.Option(None, "--eval-text", help="text-generation: text every row is teacher-forced over for KLD, top-1 and perplexity vs PyTorch (default: Python's help topics)")
EVAL_TOKENS_OPTION = typer.Option(None, "--eval-tokens", help="text-generation: tokens of the eval text scored (default 128)")
CHECKS_OPTION = typer.Option(None, "--checks", help="text-generation: JSON/TOML list of prompts with an expected substring, regex or JSON schema; gates on the pass-rate drop vs PyTorch")


CACHE_OPTION = typer.Option(True, "--cache/--no-cache", help="reuse conversions from edgeport's cache (and store new ones); see `edgeport cache info`")
REUSE_VERDICT_OPTION = typer.Option(False, "--reuse-verdict", help="on a cache hit, keep the stored parity/latency verdict instead of measuring again")
JOBS_OPTION = typer.Option(None, "--jobs", "-j", help="worker processes for the target rows (default: one per two cores; 1: one after another in this process; text generation: in this process unless given)")
MAX_MEMORY_OPTION = typer.Option(None, "--max-memory", help="memory the conversion may use, e.g. 8G (default: what is available); a model whose estimated peak exceeds it is refused before work")
ROW_TIMEOUT_OPTION = typer.Option(None, "--row-timeout", help="stop a row (convert + judge) running longer, e.g. 20m, 90s, none (default: from the model's size; [limits] row_timeout in edgeport.toml)")
ROW_MEMORY_OPTION = typer.Option(None, "--row-memory", help="stop a row whose processes use more memory, e.g. 6G, none (default: from the pre-flight estimate; [limits] row_memory)")

@app.command()
@with_target_options
def convert(
    model: str = MODEL_ARGUMENT,
    target: List[str] = typer.Option([DEFAULT_TARGET], "--target", "-t", help="target to convert for (repeatable; see `edgeport targets`)"),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="output directory"),
    quantize: List[str] = typer.Option([], "--quantize", "-q", help="extra variant, e.g. fp16, bf16, dynamic-int8, weight-int8, int8 (repeatable; `edgeport targets` lists each target's)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH], e.g. x:1x3x224x224:float32"),
    threads: str = THREADS_OPTION,
    samples: int = SAMPLES_OPTION,
    seed: int = SEED_OPTION,
    data: Optional[str] = DATA_OPTION,
    calibration_data: Optional[str] = typer.Option(None, "--calibration-data", help="int8 calibration inputs (same forms as --data)"),
    fallback: Optional[str] = typer.Option(None, "--fallback", help="float: a quantized variant over budget keeps its most sensitive layers in float until it passes; int8: keeps them at int8 (text generation: ONNX, LiteRT and ExecuTorch int4-block32)"),
    fallback_max: Optional[str] = typer.Option(None, "--fallback-max", help="most layers --fallback may keep: a share of the quantizable layers (default 25%) or a count"),
    no_latency: bool = NO_LATENCY_OPTION,
    force: bool = typer.Option(False, "--force", help="replace an --out directory edgeport wrote before"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML (relative paths land in --out)"),
    config: Optional[Path] = CONFIG_OPTION,
    budget: List[str] = BUDGET_OPTION,
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head: auto (config's architecture), base, text-classification, causal-lm, ..."),
    seq_len: int = SEQ_LEN_OPTION,
    localize: bool = typer.Option(True, "--localize/--no-localize", help="on a parity failure, bisect for the first diverging layer"),
    baseline: Optional[Path] = BASELINE_OPTION,
    decompositions: Optional[str] = DECOMPOSITIONS_OPTION,
    dynamic: List[str] = typer.Option([], "--dynamic", help="keep a dimension symbolic in the export (batch); the report says which targets kept it"),
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    trust_remote_code: bool = TRUST_REMOTE_CODE_OPTION,
    task: str = typer.Option("auto", "--task", help="auto (text-generation for hf: causal LMs, else forward), text-generation or forward"),
    prefill_len: List[int] = typer.Option([], "--prefill-len", help="text-generation: a prefill signature of this many tokens (repeatable; default 32)"),
    cache_len: Optional[int] = typer.Option(None, "--cache-len", help="text-generation: KV cache slots (prompt + generated tokens; default 256 or the model's positions)"),
    gen_tokens: Optional[int] = typer.Option(None, "--gen-tokens", help="text-generation: greedy tokens generated per judged prompt (default 16)"),
    eval_text: Optional[str] = EVAL_TEXT_OPTION, eval_tokens: Optional[int] = EVAL_TOKENS_OPTION, checks: Optional[str] = CHECKS_OPTION,
    cache: bool = CACHE_OPTION, reuse_verdict: bool = REUSE_VERDICT_OPTION,
    jobs: Optional[int] = JOBS_OPTION, max_memory: Optional[str] = MAX_MEMORY_OPTION,
    row_timeout: Optional[str] = ROW_TIMEOUT_OPTION, row_memory: Optional[str] = ROW_MEMORY_OPTION,
    target_options: dict = None,
) -> None:
    """Convert MODEL for each --target, check parity and latency, write artifacts + report to --out."""
    from edgeport import api
    from edgeport.core.memory import parse_memory

    opts = api.ConvertOptions(
        api.SourceOptions(model, tuple(input), hf_task, seq_len, tuple(dynamic), decompositions, trust_pickle, trust_remote_code),
        api.OutputOptions(out, force, junit),
        api.JudgeOptions(parse_threads(threads), samples, seed, data, not no_latency, config, tuple(budget), baseline, localize),
        tuple(target), tuple(quantize), calibration_data, target_options,
        api.GenerationOptions(task, tuple(prefill_len), cache_len, gen_tokens, eval_text, eval_tokens, checks),
        fallback, fallback_max, cache, reuse_verdict, parse_memory(max_memory) if max_memory else None, jobs,
        row_timeout or "auto", row_memory or "auto")
    finish(with_progress(lambda progress: api.convert(opts, progress)))


def finish(result) -> None:
    """The end of every command that judged artifacts: the summary, its exit code, native noise to the log."""
    native_output_to(result.out / RUN_LOG)
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


@app.command()
def validate(
    directory: Path = typer.Argument(..., help="an edgeport --out directory (report.json, manifest.json, exported.pt2)"),
    threads: str = THREADS_OPTION,
    samples: int = SAMPLES_OPTION,
    seed: int = SEED_OPTION,
    data: Optional[str] = DATA_OPTION,
    no_latency: bool = NO_LATENCY_OPTION,
    junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML (relative paths land in DIR)"),
    config: Optional[Path] = CONFIG_OPTION,
    budget: List[str] = BUDGET_OPTION,
    baseline: Optional[Path] = BASELINE_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    decompositions: Optional[str] = DECOMPOSITIONS_OPTION,
    eval_text: Optional[str] = typer.Option(None, "--eval-text", help="text-generation: score quality over this text (default: the windows convert scored)"),
    eval_tokens: Optional[int] = EVAL_TOKENS_OPTION,
) -> None:
    """Re-run parity and latency on the artifacts in DIR (no conversion) and update its report."""
    from edgeport import api

    judge = api.JudgeOptions(threads=parse_threads(threads), samples=samples, seed=seed, data=data,
                             latency=not no_latency, config=config, budgets=tuple(budget), baseline=baseline,
                             eval_text=eval_text, eval_tokens=eval_tokens)
    result = with_progress(lambda progress: api.validate(directory, judge, junit, trust_pickle, progress,
                                                         decompositions=decompositions))
    finish(result)


@app.command()
def report(
    directory: Path = typer.Argument(..., help="an edgeport --out directory holding report.json"),
    format: List[str] = typer.Option(["md", "html"], "--format", "-f", help="md, html or junit (repeatable)"),
    baseline: Optional[Path] = BASELINE_OPTION,
    config: Optional[Path] = typer.Option(None, "--config", help="edgeport.toml with [baseline] thresholds"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the one --format here instead of DIR"),
) -> None:
    """Render report.json again (report.md / report.html / junit.xml); exit code = the report's verdict."""
    from edgeport import api

    result = with_progress(lambda _progress: api.render(directory, list(format), baseline, config, output))
    finish(result)


@app.command()
def check(
    model: str = MODEL_ARGUMENT,
    target: List[str] = typer.Option([DEFAULT_TARGET], "--target", "-t", help="target to check (repeatable)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH]"),
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head"),
    seq_len: int = SEQ_LEN_OPTION,
    decompositions: Optional[str] = DECOMPOSITIONS_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    trust_remote_code: bool = TRUST_REMOTE_CODE_OPTION,
    sensitivity: bool = typer.Option(False, "--sensitivity", help="with -q: quantize each layer alone and print how far it moves the outputs (which layers --fallback float would keep float)"),
    quantize: List[str] = typer.Option([], "--quantize", "-q", help="--sensitivity: quantized variant to measure, e.g. int8 (repeatable)"),
    calibration_data: Optional[str] = typer.Option(None, "--calibration-data", help="--sensitivity: int8 calibration inputs"),
    samples: int = SAMPLES_OPTION,
    data: Optional[str] = DATA_OPTION,
    budget: List[str] = BUDGET_OPTION,
) -> None:
    """Before converting: which ops each target will refuse and which rewrite fixes them (exit 1 if unfixable);
    with --sensitivity -q VARIANT, which layers that quantization breaks (exit 1 if full int8 misses its budget)."""
    from edgeport.sources import SourceOptions

    source = SourceOptions(model=model, inputs=tuple(input), hf_task=hf_task, seq_len=seq_len,
                           decompositions=decompositions, trust_pickle=trust_pickle, trust_remote_code=trust_remote_code)
    if sensitivity or quantize:
        from edgeport import api

        judge = api.JudgeOptions(samples=samples, data=data, latency=False, budgets=tuple(budget))
        check_sensitivity(source, list(target), list(quantize), judge, calibration_data, sensitivity)
    check_ops(source, list(target))


def check_ops(source, targets: list[str]) -> None:
    from edgeport.check import check as run_check

    findings, module_rewrites = exported_or_exit_1(lambda _progress: run_check(source, targets))
    print_findings(findings, module_rewrites, list(dict.fromkeys(targets)))
    raise typer.Exit(0 if all(f.fixed for f in findings) else 1)


def exported_or_exit_1(work):
    """Run ``work(progress)`` under the progress view; a model torch.export cannot take is exit 1, one line
    (the model is at fault, not the command line)."""
    from edgeport.errors import ExportFailed

    def guarded(progress):
        try:
            return work(progress)
        except ExportFailed as exc:
            return exc

    result = with_progress(guarded)
    if isinstance(result, ExportFailed):
        typer.echo(f"edgeport: {result}", err=True)
        raise typer.Exit(1)
    return result


def check_sensitivity(source, targets: list[str], variants: list[str], judge, calibration_data, asked: bool) -> None:
    """``check --sensitivity``: the per-layer table of every (target, variant) that can keep layers float."""
    from edgeport.errors import UsageError
    from edgeport.pipeline.sensitivity import sensitivity_tables

    def work(progress):
        if not asked:
            raise UsageError("-q/--quantize on check needs --sensitivity")
        if not variants:
            raise UsageError("--sensitivity needs -q VARIANT (e.g. -q int8)")
        return sensitivity_tables(source, targets, variants, judge, calibration_data, progress)

    result = exported_or_exit_1(work)
    print_sensitivity(result)
    raise typer.Exit(0 if all(t.full["passed"] for t in result) else 1)
