"""The export formats: PRM800K, TRL stepwise supervision, ProcessBench and per-step soft labels.

PRM800K is the raw schema, written back as it was read. The other formats are about
verdicts (which rating of a step counts, where the first error is), and read them only
through `annotate.verdicts`, so they say what training, QC and review say.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from annotate import verdicts

from .loading import AnnotationRecord, annotations, solution_groups
from .options import CHUNK_SIZE, ExportError, ExportOptions, selected_annotations

FORMATS = ("prm800k", "trl", "processbench", "soft")
FORMAT_HELP = {
    "prm800k": "PRM800K: one line per submitted annotation, openai/prm800k's schema",
    "trl": "TRL stepwise supervision: prompt, completions, labels (booleans) up to the first -1",
    "processbench": "ProcessBench: id, generator, problem, steps, final_answer_correct, label",
    "soft": "Per-step soft labels: K of N annotators rated each step good",
}


def is_good(rating: int | None, *, neutral_is_good: bool) -> bool:
    return rating == 1 or (rating == 0 and neutral_is_good)


def prm800k_lines(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    from annotate import prm800k  # the import side owns the schema, both ways

    for annotation in annotations(options=options, chunk_size=chunk_size):
        yield prm800k.line_for_annotation(annotation)


def trl_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """TRL's stepwise-supervision columns along the labeled path; annotations with no rated step are skipped."""
    for annotation in annotations(options=options, chunk_size=chunk_size):
        path = verdicts.verdicts(annotation).path
        if not path:
            continue
        yield {
            "prompt": annotation.solution.problem.statement,
            "completions": [step.text for step in path],
            "labels": [is_good(step.rating, neutral_is_good=options.neutral_is_good) for step in path],
        }


def processbench_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """ProcessBench rows, one per annotation: the solution's steps and its first error (-1: none)."""
    for annotation in annotations(options=options, chunk_size=chunk_size):
        solution = annotation.solution
        verdict = verdicts.verdicts(annotation)
        steps = [step.text for step in solution.steps.all()] or [step.text for step in verdict.path]
        yield {
            "id": f"{solution.source or 'stepwise'}-{solution.id}-{annotation.id}",
            "generator": solution.generator or None,
            "problem": solution.problem.statement,
            "steps": steps,
            "final_answer_correct": solution.is_correct,
            "label": -1 if verdict.first_error is None else verdict.first_error,
        }


def soft_label_rows(*, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution and step: K annotators rated it good out of N who rated it."""
    for group in solution_groups(options=options, chunk_size=chunk_size):
        yield _soft_labels(group, neutral_is_good=options.neutral_is_good)


def _soft_labels(annotations: list[AnnotationRecord], *, neutral_is_good: bool) -> dict:
    solution = annotations[0].solution
    steps = [step.text for step in solution.steps.all()]
    good, rated = [0] * len(steps), [0] * len(steps)
    for annotation in annotations:
        for i, step in enumerate(verdicts.verdicts(annotation).path[: len(steps)]):
            # A rating counts for pool step i only if the annotator rated that very text.
            if step.text.strip() != steps[i].strip():
                continue
            rated[i] += 1
            good[i] += is_good(step.rating, neutral_is_good=neutral_is_good)
    return {
        "id": solution.id,
        "problem": solution.problem.statement,
        "steps": steps,
        "k": good,
        "n": rated,
        "soft_labels": [k / n if n else None for k, n in zip(good, rated, strict=True)],
        "annotations": len(annotations),
    }


ROWS: dict[str, Callable[..., Iterator[dict]]] = {
    "prm800k": prm800k_lines,
    "trl": trl_rows,
    "processbench": processbench_rows,
    "soft": soft_label_rows,
}


def check_format(format: str) -> str:
    if format not in ROWS:
        raise ExportError(f"format: unknown {format!r}; expected one of {', '.join(FORMATS)}")
    return format


def iter_rows(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    return ROWS[check_format(format)](options=options, chunk_size=chunk_size)


def iter_jsonl(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE) -> Iterator[str]:
    """JSON Lines, one string per line, for streaming responses and files alike."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    for row in iter_rows(format=format, options=options, chunk_size=chunk_size):
        yield dumps(row) + "\n"


def count_rows(*, format: str, options: ExportOptions) -> int:
    """How many lines the export will have (soft labels: one per solution)."""
    selected = selected_annotations(options=options)
    if check_format(format) == "soft":
        return selected.values("solution_id").distinct().count()
    return selected.count()
