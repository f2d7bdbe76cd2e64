"""The text-generation task: prefill/decode programs with an explicit KV cache, every target's artifact judged
by the tokens it generates against the model's own greedy ``generate``."""

from __future__ import annotations

from edgeport.pipeline.tasks import RowJobs, Task
from edgeport.pipeline.tasks.text_generation import directory, jobs, rows, session
from edgeport.pipeline.tasks.text_generation.report import generation_sections


def manifest(spec: str, prepared, report_rows: list[dict], staging):
    from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR
    from edgeport.pipeline.tasks.text_generation.manifest import generation_manifest

    layout = prepared.session.layout
    if layout.model != spec and (staging / EXPORTED_DIR).is_dir():
        # a GGUF source ran from its dequantized copy in the run's scratch (gone once published): the saved
        # layout names the user's spec, as the report does (validate reads the programs, not the model)
        layout.model = spec
        layout.save(staging / EXPORTED_DIR)
    return generation_manifest(spec, prepared.session, report_rows, staging)


TASK = Task("text-generation", prepare=session.prepare, build=rows.build, judge=rows.judge, manifest=manifest,
            owns_directory=directory.is_generative_dir, reference_from=directory.reference_from,
            rejudge=rows.rejudge, report_block=lambda s: s.report_block(), block_key="generation",
            sections=generation_sections, libraries=("transformers",), log_prefix="convert_generate",
            generative=True, release_after_builds=session.release_programs,
            jobs=RowJobs(jobs.shared_spec, jobs.restore, jobs.plan_rows, by_default=False))
