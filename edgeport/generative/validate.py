"""``edgeport validate DIR`` for a text-generation directory: judge every artifact again, without the model.

The reference is the flat programs saved in ``DIR/exported/`` (loaded through the same inspected,
no-unpickling loader as any .pt2), run by the same greedy loop: they are token-exact with the model's own
``generate`` (the tests check it), so a changed artifact, runtime or budget is judged against the same
tokens. Prompts are drawn again from ``--samples``/``--seed`` (plus ``--data``); eager latency is the
exported programs' own, labelled so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from edgeport.errors import UsageError
from edgeport.generative.layout import EXPORTED_DIR, LAYOUT_FILE, Layout

SIGNATURE_NAME = re.compile(r"prefill_\d+|decode")


def is_generative_dir(directory: Path) -> bool:
    return (Path(directory) / EXPORTED_DIR / LAYOUT_FILE).is_file()


def read_layout(directory: Path) -> Layout:
    path = directory / EXPORTED_DIR / LAYOUT_FILE
    try:
        layout = Layout.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    bad = [n for n in layout.signatures if not SIGNATURE_NAME.fullmatch(n)]
    if bad or "decode" not in layout.signatures:
        raise UsageError(f"{path} does not describe prefill/decode signatures (found {sorted(layout.signatures)})")
    return layout


def validate_generation(directory: Path, judge, junit, trust_pickle: bool, progress):
    from edgeport.pipeline.plan import rejudge_settings
    from edgeport.pipeline.proc import redirected
    from edgeport.pipeline.run import RUN_LOG, Result
    from edgeport.pipeline.outdir import check_own_files
    from edgeport.validate.report import read_report_dir, validate_writes, write_outputs

    old = read_report_dir(directory)
    check_own_files(directory, [RUN_LOG, *validate_writes(junit)])
    layout = read_layout(directory)
    config, flags, baseline = rejudge_settings(judge, junit)
    with redirected(directory / RUN_LOG):
        report = rejudge_all(old, directory, layout, judge, (config, flags, baseline), trust_pickle, progress)
        report = write_outputs(directory, report, None, junit)
    return Result(report, directory, 0 if report["passed"] else 1)


def reference_session(directory: Path, layout: Layout, judge, trust_pickle: bool):
    from edgeport.generative.judge import artifact_latency
    from edgeport.generative.loop import greedy
    from edgeport.generative.prompts import random_prompts, read_prompts
    from edgeport.generative.reference import ProgramRunner
    from edgeport.generative.rows import GenSession
    from edgeport.pipeline.plan import fixed_threads
    from edgeport.sources.pt2_archive import load_exported_program

    programs = {}
    for name in layout.signatures:
        path = directory / EXPORTED_DIR / f"{name}.pt2"
        if not path.is_file():
            raise UsageError(f"{directory} has no {EXPORTED_DIR}/{name}.pt2: nothing to compare the artifacts against")
        programs[name] = load_exported_program(path, trust_pickle)
    runner = ProgramRunner(programs, fixed_threads(judge.threads))
    real, data = read_prompts(judge.data, layout, directory / "tokenizer") if judge.data else ([], None)
    prompts = real + random_prompts(layout, judge.samples, judge.seed)
    reference = [greedy(runner, layout, p, layout.gen_tokens) for p in prompts]
    eager = artifact_latency(runner, layout, prompts[-1])[0] if judge.latency else None
    return GenSession(layout, programs, {}, prompts, reference, eager, judge, {}, data,
                      {"real": len(real), "random": len(prompts) - len(real)},
                      reference_source=f"the exported programs in {EXPORTED_DIR}/ (torch, greedy)",
                      eager_label="exported programs (torch)")


def rejudge_all(old: dict, directory: Path, layout: Layout, judge, settings, trust_pickle: bool, progress) -> dict:
    from edgeport.config import is_required
    from edgeport.generative.run import assemble
    from edgeport.pipeline.run import stamp

    config, flags, baseline = settings
    progress(f"loading {EXPORTED_DIR}/ (reference)")
    session = reference_session(directory, layout, judge, trust_pickle)
    rows = []
    for row in old["targets"]:
        progress(f"{row['target']} {row['variant']} (text-generation)")
        rows.append({**rejudge(row, session, directory, config, flags),
                     "required": is_required(row["target"], row["variant"], config)})
    report = assemble(old["model"]["spec"], rows, session, None, None, judge.threads, old["model"].get("params"), baseline)
    report["validated"] = {**stamp(), "threads": judge.threads, "samples": len(session.prompts)}
    return report


def rejudge(data: dict, session, directory: Path, config: dict, flags) -> dict:
    from edgeport.config import budget_for
    from edgeport.export.registry import get_target, target_names
    from edgeport.generative.judge import generation_budget
    from edgeport.generative.rows import judge_generative, tree_digest
    from edgeport.pipeline.row import Row
    from edgeport.validate.report import artifact_in

    row = Row.from_json({k: v for k, v in data.items() if k not in ("regressions", "runner_choice")})
    if not row.artifact:
        return row.to_json()
    if row.target not in target_names() or get_target(row.target).generation() is None:
        return failed(row, f"target {row.target!r} has no text-generation support in this edgeport")
    target = get_target(row.target)
    if target.missing_requirements():
        row.status, row.error = "skipped", f"not installed ({', '.join(target.missing_requirements())}): {target.install_hint}"
        return row.to_json()
    path = artifact_in(directory, row.artifact)
    if path is None or not path.exists():
        row.parity = row.latency_ms = None
        return failed(row, f"artifact missing: {row.artifact}")
    budget = generation_budget(budget_for(row.target, row.variant, config, flags), row.variant)
    row.apply(judge_generative(target.generation(), path, session, budget))
    size, digest = tree_digest(path)
    row.size_bytes = size
    if row.sha256 and digest != row.sha256:
        row.status = "failed"
        row.error = f"artifact changed since conversion: sha256 {digest[:12]}… != recorded {row.sha256[:12]}… " \
                    f"({row.error or 'generation still within budget'})"
    return row.to_json()


def failed(row, error: str) -> dict:
    row.status, row.error = "failed", error
    return row.to_json()
