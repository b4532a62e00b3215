"""`fathom eval PROJECT`: search quality on the user's own code, per question set and mode.

What it owns: the command's options and its presentation (a table per set, or `--json`).
The evaluation itself is the service's (`fathom.service.evaluation`): a docstring-free copy
of the folder indexed into a temporary data dir, so the user's indexes are never touched.

What it refuses to do: evaluate anything itself, or print progress on stdout under `--json`
(stdout is then the JSON alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text


def print_report(out: Any, report: Any) -> None:
    out.print(
        Text(
            f"{report.project}: {report.files} files, {report.chunks} code chunks, "
            f"encoded by {report.model} at {report.chunks_per_s:.0f} chunks/s "
            f"(index {report.index_s:.0f} s)"
        )
    )
    for s in report.sets:
        table = Table(title=f"{s.name}: {s.queries} questions", title_justify="left")
        for col in ("mode", "MRR@10", "hit@1", "hit@3", "hit@10", "file@3", "file@3 s", "p50 ms", "p95 ms"):
            table.add_column(col, justify="left" if col == "mode" else "right", no_wrap=col == "mode")
        for m in s.modes:
            table.add_row(
                m.mode,
                f"{m.mrr:.3f}",
                f"{m.hit1:.3f}",
                f"{m.hit3:.3f}",
                f"{m.hit10:.3f}",
                f"{m.file3:.3f}",
                f"{m.file3_scored:.3f}",
                f"{m.p50_ms:.1f}",
                f"{m.p95_ms:.1f}",
            )
        out.print(table)
    out.print(
        Text(
            "fused: the hybrid search as shipped. file@3: the right file among the "
            "first three files of the top 10, in best-hit order (file@3 s: ordered by "
            "file score)."
        )
    )


def register(app: typer.Typer, *, out: Any, err: Any, settings: Any, runner: Any) -> None:
    @app.command("eval")
    def eval_command(
        ctx: typer.Context,
        path: Annotated[Path, typer.Argument(help="The project folder to evaluate.")],
        sets: Annotated[
            str,
            typer.Option("--sets", help="Question sets, comma-separated: docstring, identifier, questions."),
        ] = "docstring,identifier,questions",
        questions: Annotated[
            Path | None,
            typer.Option(
                "--questions",
                metavar="FILE",
                help="Your own questions: a JSON or YAML list of {question, file} (the file "
                "relative to the project folder), or a labelled set of {query, relevant, "
                "secondary} as semble's benchmark writes it.",
            ),
        ] = None,
        limit: Annotated[
            int, typer.Option("--limit", min=1, help="At most this many questions per generated set.")
        ] = 200,
        as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    ) -> None:
        """Measure search quality on your own code, no labels needed.

        Indexes a copy of the folder without its docstrings in a temporary data dir (your
        indexes are untouched), then asks questions made from the code: each docstring's
        first sentence (answer: its definition), each definition's name in words
        ("background tasks" for BackgroundTasks), and your --questions. Prints MRR@10 and
        hit@k per mode (vector, keyword, fused) for the embedding model in use (the one
        `fathom models use embed` chose), which the report names."""
        from fathom.service.evaluation import evaluate

        chosen = [s.strip() for s in sets.split(",") if s.strip()]
        say = (
            (lambda line: err.print(Text(line, style="dim")))
            if as_json
            else (lambda line: out.print(Text(line, style="dim")))
        )
        report = runner(
            evaluate(settings(ctx), path, sets=chosen, questions=questions, limit=limit, progress=say)
        )
        if as_json:
            typer.echo(json.dumps(report.as_dict(), indent=2))
        else:
            print_report(out, report)
