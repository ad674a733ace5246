"""TRL stepwise supervision: prompt, completions, labels (booleans), as TRL's PRM800K converter
writes them; from automatic labels, as its Math-Shepherd converter does."""
from __future__ import annotations

import functools
from collections.abc import Iterator

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
from steps.ratings import is_error, is_good


def trl_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
             chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """TRL's stepwise-supervision rows, as TRL's own PRM800K converter writes them.

    Per annotation, walking its steps: every rated completion shown at a step and not
    continued (a rejected alternative, the pool step an annotator rewrote, the step stopped
    at) gives a row: the path so far plus that completion, labeled by its rating. The path
    continues with the chosen or human completion and ends at the first -1 or unrated step;
    the walked path is the last row (none when empty). Each row's texts are the texts that
    carry its labels.
    """
    good = functools.partial(is_good, neutral_is_good=options.neutral_is_good)
    for annotation, verdict in labeled_annotations(project=project, options=options, tally=tally,
                                                   chunk_size=chunk_size):
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


def automatic_rows(*, project: Project, tally: ExportTally, chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """A solution's steps up to its first unlabeled one, each good when K > 0 (Math-Shepherd's hard
    estimate), as TRL's Math-Shepherd converter keeps every labeled step."""
    for chunk in automatic.labeled_solution_chunks(project, chunk_size):
        for solution, steps, labels in chunk:
            tally.read += 1
            completions, good = [], []
            for i, text in enumerate(steps):
                if i not in labels:
                    break
                completions.append(text)
                good.append(automatic.pooled(labels[i])[0] > 0)
            if completions:
                yield {"prompt": solution.problem.statement, "completions": completions, "labels": good,
                       "label_source": "automatic"}
            else:
                tally.skip("automatic_first_step_unlabeled")


def sourced_rows(*, project: Project, options: ExportOptions, tally: ExportTally,
                 chunk_size: int = CHUNK_SIZE) -> Iterator[dict]:
    """A solution's steps up to the first without a label (a step the judge skipped, or the
    sources did not agree on: a row is a prefix, so it is cut before it), each good by the judge's
    verdict or the agreed one; a consensus row ends at the first agreed bad step."""
    for found in sourced.solutions(project=project, options=options, tally=tally, chunk_size=chunk_size):
        prefix = found.labeled_prefix()
        if not prefix:
            tally.skip(f"{found.source}_first_step_unlabeled")
            continue
        yield {"prompt": found.solution.problem.statement, "completions": [step.text for step in prefix],
               "labels": [bool(step.good) for step in prefix], "assistance": None, "label_source": found.source}


def features(t: ArrowTypes, automatic_labels: bool) -> dict:
    return {"prompt": t.text, "completions": t.list_of(t.text), "labels": t.list_of(t.boolean), **t.assistance,
            **({"label_source": t.text} if automatic_labels else {})}


FORMAT = ExportFormat(
    name="trl",
    help="TRL stepwise supervision: prompt, completions, labels (booleans), as TRL's PRM800K converter writes them",
    unit="annotations",
    rows=trl_rows,
    automatic_rows=automatic_rows,
    sourced_rows=sourced_rows,
    label_sources=LABEL_SOURCES,
    features=features,
    columns={
        "prompt": "the problem",
        "completions": "the steps of a path, one string each (do not join: a step may hold newlines)",
        "labels": "per step, whether it is good",
        "assistance": ASSISTANCE,
        "label_source": "`human` (annotators), `automatic` (rollouts or an imported dataset; good when "
                        "K > 0 of the step's rollouts reached the answer), `judge` or `consensus`",
    },
    semantics="One row per rejected alternative and one per walked path, as TRL's PRM800K converter "
              "writes them; each path ends at the first bad or unrated step. Labels read the verdict of "
              "the very text in the row (chosen, human-written or stopped-at completion): a step the "
              "annotator rewrote is False in the row ending at it, and its rewrite is True in the path, "
              "which goes on with the steps rated after it. Train with trl 1.13: `from trl.experimental.prm "
              "import PRMConfig, PRMTrainer` (not in trl's top-level package); trl 1.14 and later ship no PRM "
              "trainer, so pin `trl<=1.13`.",
    automatic_semantics="Automatic rows: a solution's steps up to its first unlabeled one, good when K > 0 of the "
                        "rollouts from the step reached the answer (Math-Shepherd's hard estimate; an imported "
                        "verdict is one vote), steps after a bad one kept as TRL's Math-Shepherd converter keeps "
                        "them.",
    sourced_semantics="Judge rows: a solution's steps up to the first the judge gave no verdict, each good by "
                      "its verdict (P(good) at least one half). Consensus rows: the steps up to the first the "
                      "chosen sources did not agree on (the row is cut before it) or through the first agreed "
                      "bad step, each labeled as they agree.",
)
