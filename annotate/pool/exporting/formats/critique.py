"""Verification chains as chat messages, what a generative verifier (ThinkPRM-style) is fine-tuned
on: the user gives the problem and numbered steps, the assistant answers with each step's critique
and verdict, up to the first incorrect step (`steps.verification` writes both sides).

From a judge (`labels=judge`): its critique and verdict per step. From people (the default): each
annotation's verdicts of the pool's steps, with what the annotator wrote where they wrote
something: the step as they would have written it (a human completion) and their flag.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

from annotate.labeling.verdicts import PoolStepLabel
from annotate.models import Project
from annotate.pool.exporting import sourced
from annotate.pool.exporting.formats.base import ArrowTypes, ExportFormat, ExportTally, labeled_annotations
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions
from steps import verification
from steps.ratings import is_good


def chain_row(problem: str, steps: Sequence[str], verdicts: Sequence[tuple[str, bool]], *, solution_id: int,
              source: str) -> dict:
    """The chat row: the whole solution in the prompt, the chain up to its first incorrect step."""
    end = next((i + 1 for i, (_, good) in enumerate(verdicts) if not good), len(verdicts))
    return {"messages": [{"role": "user", "content": verification.render_prompt(
                             verification.DEFAULT_TEMPLATE, problem=problem, steps=steps)},
                         {"role": "assistant", "content": verification.verification_chain(verdicts[:end])}],
            "solution_id": solution_id, "source": source}


def human_critique(label: PoolStepLabel) -> str:
    """What an annotator said of a step beyond its rating: their rewrite and their flag."""
    said = []
    if label.written_instead:
        said.append(f"The step should read: {label.written_instead.strip()}")
    if label.flagged:
        said.append("The annotator flagged this step.")
    return " ".join(said)


def human_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
               chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per annotation, its verdicts of the pool's steps up to and including the first -1."""
    good = functools.partial(is_good, neutral_is_good=options.neutral_is_good)
    for annotation, verdict in labeled_annotations(project=project, options=options, tally=tally,
                                                   chunk_size=chunk_size):
        rated = [(human_critique(label), good(rating))
                 for label, rating in zip(verdict.pool_labels, verdict.pool_path, strict=True) if rating is not None]
        if not rated:
            tally.skip("first_step_unrated")
            continue
        solution = annotation.solution
        yield chain_row(solution.problem.statement, verdict.pool_steps, rated, solution_id=solution.id,
                        source="human")


def judge_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
               chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per judged solution, the judge's critique and verdict of each step up to the first it skipped."""
    for judged in sourced.solutions(project=project, options=options, tally=tally, chunk_size=chunk_size):
        prefix = judged.labeled_prefix()
        if not prefix:
            tally.skip("judge_first_step_unlabeled")
            continue
        yield chain_row(judged.solution.problem.statement, [step.text for step in judged.steps],
                        [(step.critique, bool(step.good)) for step in prefix], solution_id=judged.solution.id,
                        source="judge")


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    return {"messages": t.list_of({"role": t.text, "content": t.text}), "solution_id": t.integer, "source": t.text}


FORMAT = ExportFormat(
    name="critique",
    help="Critique: verification chains as chat messages (problem and steps; a critique and verdict per step)",
    unit="annotations",
    rows=human_rows,
    sourced_rows=judge_rows,
    label_sources=("human", "judge"),
    features=features,
    columns={
        "messages": "`user`: the problem, its numbered steps and the instruction; `assistant`: per step its "
                    "critique, then `Step k: correct` or `Step k: incorrect`, up to the first incorrect step",
        "solution_id": "the solution's id",
        "source": "`human` (an annotation's verdicts, with its rewrites and flags as critiques) or `judge`",
    },
    semantics="One row per annotation (human) or judged solution (judge): the chat a generative verifier is "
              "fine-tuned on (`messages`, as TRL's SFTTrainer and chat templates read them). A human step's "
              "critique is what its annotator wrote: the step as they would have written it, and their flag; "
              "a step they only rated has its verdict line alone. The neutral rule applies to human verdicts.",
    sourced_semantics="Judge rows: the judge's critique and verdict (P(good) at least one half) per step, up to "
                      "the first step it gave no verdict or the first it called incorrect.",
)
