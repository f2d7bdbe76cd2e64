"""``generate``: greedy text generation with an artifact a text-generation conversion wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgeport.cli.app import app, native_output_to, parse_threads, with_progress


@app.command()
def generate(
    directory: Path = typer.Argument(..., help="an edgeport --out directory of a --task text-generation conversion"),
    target: str = typer.Option(..., "--target", "-t", help="whose artifact generates (see the report)"),
    variant: Optional[str] = typer.Option(None, "--variant", help="artifact variant (default: the target's first)"),
    prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", help="prompt token ids, e.g. 1,2,3"),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="prompt text (needs the tokenizer copied into DIR)"),
    max_new: int = typer.Option(16, "--max-new", help="new tokens at most (generation stops at an eos id)"),
    threads: str = typer.Option("1", "--threads", help="runtime threads"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of lines"),
) -> None:
    """Generate greedily from a prompt with DIR's artifact for --target; print the ids (and the text)."""
    from edgeport.pipeline.tasks.text_generation import generate as gen

    from edgeport.core.proc import terminal_stream

    count = parse_threads(threads)
    out = None if as_json else terminal_stream(1)

    def on_text(piece: str) -> None:  # a bundle runtime streams tokens: show them as they come
        out.write(piece)
        out.flush()

    result = with_progress(lambda progress: gen.generate(directory, target, variant, prompt_ids, prompt, max_new,
                                                         1 if count == "auto" else count,
                                                         on_text if out else None))
    # generate releases its runtime inside its own capture; what a library still prints at exit goes to the log
    # (after, not before: Python-level library noise during generate is captured on fd 2, which
    # native_output_to would take sys.stderr away from)
    native_output_to(Path(directory) / "edgeport.log")
    if out is not None and result.streamed:
        out.write("\n")
        out.flush()
    if as_json:
        typer.echo(gen.as_json(result))
        return
    typer.echo(f"{result.target} {result.variant}: {len(result.tokens)} tokens"
               + (" (stopped at eos)" if result.stopped_at_eos else ""))
    typer.echo("ids: " + ",".join(str(t) for t in result.tokens))
    if result.text is not None:
        from edgeport.validate.render import printable

        typer.echo("text: " + printable(result.text, markup=False))
