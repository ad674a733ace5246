"""PRM800K: one line per submitted annotation, in openai/prm800k's schema, written back as it was
read (`annotate.pool.prm800k` owns the schema, both ways). Each step keeps its own record of
what its annotator saw. Asked for automatic labels, each step gains `auto_labels`."""
from __future__ import annotations

from collections.abc import Iterator

from annotate.models import Project
from annotate.pool import prm800k
from annotate.pool.exporting import automatic, loading
from annotate.pool.exporting.formats.base import ArrowTypes, ExportFormat, ExportTally
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions


def prm800k_lines(*, project: Project, options: ExportOptions, tally: ExportTally,
                  chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    def line_for(annotation) -> dict:
        tally.read += 1
        tally.total_time[prm800k.total_time(annotation).source] += 1
        return prm800k.line_for_annotation(annotation)

    if options.labels != "human":  # Asked for: each step's automatic labels as an extra key.
        chunks = loading.annotation_chunks(project=project, options=options, chunk_size=chunk_size)
        yield from with_auto_labels(chunks, line_for)
        return
    for annotation in loading.annotations(project=project, options=options, chunk_size=chunk_size):
        yield line_for(annotation)


def with_auto_labels(annotation_chunks, line_for) -> Iterator[dict]:
    """PRM800K lines, each step with `auto_labels` (its pool step's automatic labels), a key
    PRM800K readers ignore; the human fields are unchanged."""
    for chunk in annotation_chunks:
        labels = automatic.labels_by_step({a.solution_id for a in chunk})
        for annotation in chunk:
            line = line_for(annotation)
            by_index = labels.get(annotation.solution_id, {})
            for i, step in enumerate(line["label"]["steps"]):
                step["auto_labels"] = [label.as_dict() for label in by_index.get(i, [])]
            yield line


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    auto = {"auto_labels": t.list_of({"source": t.text, "method": t.text, "kind": t.text, "n_rollouts": t.integer,
                                      "n_correct": t.integer, "soft": t.number})}
    completion = {"text": t.text, "rating": t.integer, "flagged": t.boolean}
    human = {"text": t.text, "rating": t.integer, "source": t.text, "flagged": t.boolean,
             "corrected_rating": t.integer}
    step = {"completions": t.list_of(completion), "human_completion": human, "chosen_completion": t.integer,
            **(auto if automatic_labels else {})}
    question = {"problem": t.text, "ground_truth_solution": t.text, "ground_truth_answer": t.text,
                "pre_generated_steps": t.list_of(t.text), "pre_generated_answer": t.text,
                "pre_generated_verifier_score": t.number}
    return {"labeler": t.text, "timestamp": t.text, "generation": t.integer,
            "is_quality_control_question": t.boolean, "is_initial_screening_question": t.boolean,
            "question": question, "label": {"steps": t.list_of(step), "total_time": t.integer,
                                            "finish_reason": t.text},
            "guideline_version": t.integer}


def arrow_row(row: dict) -> dict:
    """A line as the schema holds it: PRM800K allows a human completion given as bare text."""
    for step in row["label"]["steps"]:
        if isinstance(step.get("human_completion"), str):
            step["human_completion"] = {"text": step["human_completion"]}
    return row


FORMAT = ExportFormat(
    name="prm800k",
    help="PRM800K: one line per submitted annotation, openai/prm800k's schema",
    unit="annotations",
    rows=prm800k_lines,
    features=features,
    arrow_row=arrow_row,
    columns={
        "labeler": "the annotator's id", "timestamp": "when the label was made",
        "generation": "the queue generation the task came from",
        "is_quality_control_question": "a quality-control task with a known answer",
        "is_initial_screening_question": "a screening task",
        "question": "problem, ground truth, the pool's steps (`pre_generated_steps`) and answer",
        "label": "per step: the completions shown with their rating (-1, 0, +1) and flag, the human "
                 "completion written, the chosen completion (null where the human completion was gone on "
                 "from); total time (ms, always a whole number for tasks labeled here); the finish reason",
        "guideline_version": "the project's guideline version the label was made under (a key PRM800K readers "
                             "ignore; null, and absent from JSON Lines, where unknown: imported labels)",
    },
    semantics="The annotators' ratings as given: +1 good, 0 neutral (reasonable but no progress), "
              "-1 bad; a task ends at the first -1 unless the project has annotators rate every step "
              "(a reviewer's -1 ends it there too: the ratings given after it are not written). "
              "A step the annotator rewrote keeps its -1 completion, holds the rewrite in "
              "`human_completion` and has `chosen_completion` null, as in PRM800K's phase 1. "
              "`total_time` is the active time the labeling page measured, else (no time reported) the "
              "time from claim to submit; the counts below say how many lines have each. The neutral "
              "rule below does not apply: 0 stays 0.",
    automatic_semantics="Each step also has `auto_labels`: the automatic labels of the pool step at that index, "
                        "one per run (source, method, kind, n_rollouts, n_correct, soft); PRM800K readers ignore "
                        "the key.",
)
