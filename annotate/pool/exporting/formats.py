"""The export formats: PRM800K, TRL stepwise supervision, ProcessBench and per-step soft labels.

PRM800K is the raw schema, written back as it was read. The other formats are about
verdicts (which rating of a step counts, where the first error is), and read them only
through `annotate.labeling.verdicts`, so they say what training, QC and review say.

Every human row says what its annotators saw of the model (`assistance`, read from the
ratings' records of `annotate.labeling.assistance`), so a dataset can be filtered by it;
PRM800K keeps each step's record itself.
"""
from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from annotate.labeling import assistance, verdicts
from annotate.models import FinishReason
from annotate.pool import prm800k  # the import side owns the schema, both ways
from annotate.pool.exporting import automatic, loading
from annotate.pool.exporting.loading import AnnotationRecord, annotation_chunks, solution_groups
from annotate.pool.exporting.options import CHUNK_SIZE, ExportError, ExportOptions, selected_annotations
from steps.ratings import is_error, is_good  # is_good: the exporter's public name too

FORMATS = ("prm800k", "trl", "processbench", "soft")
FORMAT_HELP = {
    "prm800k": "PRM800K: one line per submitted annotation, openai/prm800k's schema",
    "trl": "TRL stepwise supervision: prompt, completions, labels (booleans), as TRL's PRM800K converter writes them",
    "processbench": "ProcessBench: one row per solution: id, generator, problem, steps, final_answer_correct, label",
    "soft": "Per-step soft labels: K of N annotators rated each step good",
}
# Formats with one row per solution (their progress counts solutions, not annotations).
PER_SOLUTION = ("processbench", "soft")


@dataclass
class ExportTally:
    """What an export read and what it left out, by reason: the job summary. `total_time`
    counts PRM800K lines by where their `total_time` came from (`prm800k.total_time`)."""

    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    total_time: Counter = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def report(self) -> dict:
        """What the export says of its lines beyond what it left out (ExportJob.report)."""
        return {"total_time": dict(sorted(self.total_time.items()))} if self.total_time else {}


def assistance_of(annotations: list[AnnotationRecord]) -> dict:
    """What the annotators of a row saw of the model (assistance.summary of their ratings' records)."""
    return assistance.summary(label.assistance for a in annotations for label in a.step_labels.all())


def prm800k_lines(*, options: ExportOptions, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    def line_for(annotation) -> dict:
        tally.read += 1
        tally.total_time[prm800k.total_time(annotation).source] += 1
        return prm800k.line_for_annotation(annotation)

    if options.labels != "human":  # Asked for: each step's automatic labels as an extra key.
        yield from automatic.with_prm800k_extras(annotation_chunks(options=options, chunk_size=chunk_size), line_for)
        return
    for annotation in loading.annotations(options=options, chunk_size=chunk_size):
        yield line_for(annotation)


def labeled(annotation: AnnotationRecord, tally: ExportTally, *, trainable: bool = True) -> verdicts.Verdicts | None:
    """The annotation's verdicts, or None (counted) when it has none to give: a bad problem says
    nothing about its steps, and a finish reason its ratings contradict is never exported
    (`Verdicts.withheld`, the rule training rows follow too)."""
    verdict = verdicts.verdicts(annotation)
    reason = verdict.withheld(annotation.finish_reason, trainable=trainable)
    if reason is not None:
        tally.skip(reason)
        return None
    return verdict


def trl_rows(*, options: ExportOptions, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """TRL's stepwise-supervision rows, as TRL's own PRM800K converter writes them.

    Per annotation, walking its steps: every rated completion shown at a step and not
    continued (a rejected alternative, the pool step an annotator rewrote, the step stopped
    at) gives a row: the path so far plus that completion, labeled by its rating. The path
    continues with the chosen or human completion and ends at the first -1 or unrated step;
    the walked path is the last row (none when empty). Each row's texts are the texts that
    carry its labels.
    """
    good = functools.partial(is_good, neutral_is_good=options.neutral_is_good)
    for annotation in loading.annotations(options=options, chunk_size=chunk_size):
        tally.read += 1
        verdict = labeled(annotation, tally)
        if verdict is None:
            continue
        prompt = annotation.solution.problem.statement
        seen = assistance_of([annotation])
        texts: list[str] = []
        labels: list[bool] = []
        for step in verdict.steps:
            ended = step.source == "stopped" or step.rating is None
            rejected = [*((step,) if ended and step.rating is not None else ()), *step.alternatives]
            for shown in sorted(rejected, key=lambda c: c.completion_index or 0):
                if shown.rating is not None:
                    yield {"prompt": prompt, "completions": [*texts, shown.text],
                           "labels": [*labels, good(shown.rating)], "assistance": seen}
            if ended:
                break
            texts.append(step.text)
            labels.append(good(step.rating))
            if is_error(step.rating):
                break
        if texts:
            yield {"prompt": prompt, "completions": texts, "labels": labels, "assistance": seen}


def processbench_rows(*, options: ExportOptions, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """ProcessBench rows, one per solution: its own steps and the index of the first wrong one.

    `label` is the first pool step whose verdict is -1 (-1: every step correct, the one place
    -1 means "no error"), from the annotations that decide it (finished as solution /
    found_error, consistent, every step before the error rated). One label per solution: the
    annotations' label when they agree, else the latest reviewed annotation's (a reviewer's
    decision); otherwise it is left out. A solution with no known grade is left out:
    `final_answer_correct` is always a boolean. An annotation rating every step correct of a
    solution whose answer grades as wrong is left out too (`answer_contradicts_labels`, counted):
    the row would state both; the review page lists it for a reviewer.
    """
    for group in solution_groups(options=options, chunk_size=chunk_size):
        tally.read += 1
        solution = group[0].solution
        if solution.is_correct is None:
            tally.skip("unknown_grade")
            continue
        deciding, label = _solution_label(group, tally)
        if not deciding:
            continue
        yield {
            "id": f"{solution.source or 'stepwise'}-{solution.id}",
            "generator": solution.generator or (solution.meta or {}).get("model") or "unknown",
            "problem": solution.problem.statement,
            "steps": [step.text for step in solution.steps.all()],
            "final_answer_correct": bool(solution.is_correct),
            "label": -1 if label is None else label,
            "assistance": assistance_of(deciding),
        }


def _solution_label(group: list[AnnotationRecord], tally: ExportTally) -> tuple[list[AnnotationRecord], int | None]:
    """(the annotations that decide it, none when undecided; the first error, None when there is
    none) of one solution's annotations."""
    decided: list[tuple[AnnotationRecord, int | None]] = []
    for annotation in group:
        verdict = labeled(annotation, tally, trainable=False)
        if verdict is None:
            continue
        if not verdict.decides_first_error(annotation.finish_reason):
            reason = annotation.finish_reason
            tally.skip(reason if reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM) else "undecided")
            continue
        if verdict.contradicts_grade(annotation.finish_reason, annotation.solution.is_correct):
            tally.skip("answer_contradicts_labels")
            continue
        decided.append((annotation, verdict.first_error))
    if not decided:
        return [], None
    if len({label for _, label in decided}) == 1:
        return [annotation for annotation, _ in decided], decided[0][1]
    reviewed = [(annotation.reviewed_at, annotation, label) for annotation, label in decided if annotation.reviewed_at]
    if reviewed:
        _, annotation, label = max(reviewed, key=lambda found: found[0])
        return [annotation], label
    tally.skip("disagreement")
    return [], None


def soft_label_rows(*, options: ExportOptions, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per solution and step: K annotators rated it good out of N who rated that very text."""
    for group in solution_groups(options=options, chunk_size=chunk_size):
        tally.read += 1
        found = [(a, v) for a in group if (v := labeled(a, tally)) is not None]
        if found:
            row = _soft_labels(group[0].solution, [v for _, v in found], neutral_is_good=options.neutral_is_good)
            yield {**row, "assistance": assistance_of([a for a, _ in found])}


def _soft_labels(solution, labels: list[verdicts.Verdicts], *, neutral_is_good: bool) -> dict:
    steps = [step.text for step in solution.steps.all()]
    good, rated = [0] * len(steps), [0] * len(steps)
    for verdict in labels:
        for i, rating in enumerate(verdict.pool_path):
            if rating is None:
                continue
            rated[i] += 1
            good[i] += is_good(rating, neutral_is_good=neutral_is_good)
    return {
        "id": solution.id,
        "problem": solution.problem.statement,
        "steps": steps,
        "k": good,
        "n": rated,
        "soft_labels": [k / n if n else None for k, n in zip(good, rated, strict=True)],
        "annotations": len(labels),
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


AUTOMATIC_ROWS: dict[str, Callable[..., Iterator[dict]]] = {"trl": automatic.trl_rows, "soft": automatic.soft_rows}


def iter_rows(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE,
              tally: ExportTally | None = None) -> Iterator[dict]:
    tally = tally or ExportTally()
    check_labels(format, options)
    if options.labels == "human" or format not in AUTOMATIC_ROWS:
        return ROWS[format](options=options, tally=tally, chunk_size=chunk_size)
    return _with_automatic(format=format, options=options, tally=tally, chunk_size=chunk_size)


def _with_automatic(*, format: str, options: ExportOptions, tally: ExportTally, chunk_size: int) -> Iterator[dict]:
    """Human rows (with `both`), then automatic rows: each row says whose labels it carries."""
    if options.labels == "both":
        for row in ROWS[format](options=options, tally=tally, chunk_size=chunk_size):
            yield {**row, "label_source": "human"}
    # No annotator saw anything: the column is null, so every row has the same keys.
    for row in AUTOMATIC_ROWS[format](tally=tally, chunk_size=chunk_size):
        yield {**row, "assistance": None}


def check_labels(format: str, options: ExportOptions) -> None:
    if options.labels != "human" and check_format(format) == "processbench":
        raise ExportError("labels: processbench takes human labels only (its label is the annotators' first error)")


def iter_jsonl(*, format: str, options: ExportOptions, chunk_size: int = CHUNK_SIZE,
               tally: ExportTally | None = None) -> Iterator[str]:
    """JSON Lines, one string per line, for streaming responses and files alike."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    for row in iter_rows(format=format, options=options, chunk_size=chunk_size, tally=tally):
        yield dumps(row) + "\n"


def count_inputs(*, format: str, options: ExportOptions) -> int:
    """How many annotations (per-solution formats: solutions) the export will read."""
    check_labels(format, options)
    offers_automatic = format in AUTOMATIC_ROWS and options.labels != "human"
    automatic_count = automatic.count_labeled_solutions() if offers_automatic else 0
    if offers_automatic and options.labels == "automatic":
        return automatic_count
    selected = selected_annotations(options=options)
    if format in PER_SOLUTION:
        return selected.values("solution_id").distinct().count() + automatic_count
    return selected.count() + automatic_count
