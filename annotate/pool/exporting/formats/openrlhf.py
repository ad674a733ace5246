"""OpenRLHF's process reward data (`openrlhf.cli.train_prm`): the problem and steps as one text,
each step closed by the placeholder token, and one label per placeholder.

OpenRLHF's `ProcessRewardDataset` (openrlhf/datasets/process_reward_dataset.py) tokenizes
`row[--input_key]`, finds the `--placeholder_token`'s positions, and puts `row[--label_key]` on
them in order: strings from `--reward_tokens` (hard) or floats (soft, P(good), read against the
first two reward tokens). So each row holds exactly as many labels as placeholders: a row is a
prefix of labeled steps, and a text that holds the placeholder itself is left out.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

from annotate.models import Project
from annotate.pool.exporting import automatic, sourced
from annotate.pool.exporting.formats.base import (
    ASSISTANCE,
    ArrowTypes,
    ExportFormat,
    ExportTally,
    assistance_of,
    labeled_annotations,
)
from annotate.pool.exporting.options import CHUNK_SIZE, LABEL_SOURCES, ExportOptions
from steps.ratings import is_good

# OpenRLHF's example PRM script's tokens (`--placeholder_token ки --reward_tokens + -`), as in Math-Shepherd.
PLACEHOLDER = "ки"
GOOD, BAD = "+", "-"


def row(problem: str, steps: Sequence[str], good: Sequence[bool], soft: Sequence[float], *, solution_id: int,
        tally: ExportTally) -> dict | None:
    """One row: Math-Shepherd's layout (the problem, then each step followed by " ки"), the hard
    labels (`label`) and the soft ones (`value`); None (counted) when a text holds the placeholder."""
    if PLACEHOLDER in problem or any(PLACEHOLDER in text for text in steps):
        tally.skip("placeholder_in_text")
        return None
    text = problem.strip() + "\n" + "\n".join(f"{step.strip()} {PLACEHOLDER}" for step in steps)
    return {"input": text, "label": [GOOD if g else BAD for g in good], "value": [float(p) for p in soft],
            "solution_id": solution_id}


def human_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
               chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Per annotation, the pool's steps its annotator rated, up to and including the first -1."""
    good = functools.partial(is_good, neutral_is_good=options.neutral_is_good)
    for annotation, verdict in labeled_annotations(project=project, options=options, tally=tally,
                                                   chunk_size=chunk_size):
        ratings = [rating for rating in verdict.pool_path if rating is not None]
        if not ratings:
            tally.skip("first_step_unrated")
            continue
        solution = annotation.solution
        verdicts = [good(rating) for rating in ratings]
        found = row(solution.problem.statement, verdict.pool_steps[:len(ratings)], verdicts,
                    [float(g) for g in verdicts], solution_id=solution.id, tally=tally)
        if found:
            yield {**found, "assistance": assistance_of([annotation])}


def automatic_rows(*, project: Project, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """A solution's steps up to its first unlabeled one: `+` when K > 0, value K/N pooled over runs."""
    for chunk in automatic.labeled_solution_chunks(project, chunk_size):
        for solution, steps, labels in chunk:
            tally.read += 1
            votes = []
            for i in range(len(steps)):
                if i not in labels:
                    break
                votes.append(automatic.pooled(labels[i]))
            if not votes:
                tally.skip("automatic_first_step_unlabeled")
                continue
            found = row(solution.problem.statement, steps[:len(votes)], [k > 0 for k, _ in votes],
                        [k / n for k, n in votes], solution_id=solution.id, tally=tally)
            if found:
                yield {**found, "label_source": "automatic"}


def sourced_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
                 chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """Judge or consensus: the steps up to the first without a label, value the judge's P(good)
    or the agreed 1.0 / 0.0."""
    for labeled_solution in sourced.solutions(project=project, options=options, tally=tally, chunk_size=chunk_size):
        prefix, solution = labeled_solution.labeled_prefix(), labeled_solution.solution
        if not prefix:
            tally.skip(f"{labeled_solution.source}_first_step_unlabeled")
            continue
        found = row(solution.problem.statement, [s.text for s in prefix], [bool(s.good) for s in prefix],
                    [s.soft or 0.0 for s in prefix], solution_id=solution.id, tally=tally)
        if found:
            yield {**found, "assistance": None, "label_source": labeled_solution.source}


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    return {"input": t.text, "label": t.list_of(t.text), "value": t.list_of(t.number), "solution_id": t.integer,
            **t.assistance, **({"label_source": t.text} if automatic_labels else {})}


FORMAT = ExportFormat(
    name="openrlhf",
    help="OpenRLHF PRM: input with a placeholder after each step, label (+/-) and value (P(good)) per step",
    unit="annotations",
    rows=human_rows,
    automatic_rows=automatic_rows,
    sourced_rows=sourced_rows,
    label_sources=LABEL_SOURCES,
    features=features,
    columns={
        "input": f"the problem, a newline, then each step followed by a space and `{PLACEHOLDER}` (OpenRLHF's "
                 "`--input_key input`)",
        "label": "per placeholder, `+` (good) or `-` (bad): hard labels (`--label_key label --reward_tokens + -`)",
        "value": "per placeholder, P(good): soft labels (`--label_key value`); 1.0 / 0.0 for a human verdict",
        "solution_id": "the solution's id",
        "assistance": ASSISTANCE,
        "label_source": "`human`, `automatic`, `judge` or `consensus`",
    },
    semantics=f"Train with `openrlhf.cli.train_prm --input_key input --label_key label --placeholder_token "
              f"{PLACEHOLDER} --reward_tokens + -` (soft: `--label_key value`; the first reward token is the "
              "good one). One row per annotation: the pool's steps its annotator rated, up to and including "
              "the first bad one, each labeled by its verdict. A row has exactly one label per placeholder; "
              f"a problem or step holding `{PLACEHOLDER}` itself is left out (`placeholder_in_text`).",
    automatic_semantics="Automatic rows: a solution's steps up to its first unlabeled one, `+` when K > 0 of the "
                        "step's rollouts reached the answer, value K/N pooled over the runs.",
    sourced_semantics="Judge rows: the steps up to the first the judge skipped, value its P(good). Consensus rows: "
                      "the steps up to the first the chosen sources did not agree on (the row is cut before it) "
                      "or through the first agreed bad step, value 1.0 / 0.0.",
)
