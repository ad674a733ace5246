"""Judge and consensus labels in exports (`labels=judge|consensus`), read through
`annotate.labeling.sources`, the one reader of every source's word on a step.

- **judge**: the latest judge run's word on each step: its verdict, P(good) and critique.
- **consensus**: a step keeps a label only where every source named in `ExportOptions.consensus`
  gives the same verdict (`sources.consensus`, Qwen's consensus filtering); the label is the agreed
  one, hard (1.0 / 0.0), and a solution's labels end at its first agreed bad step (PRM800K's rule).
  A step one source is silent on, or on which they differ, keeps no label; each format says what
  that does to its row. The tally counts every step by outcome (`CONSENSUS_OUTCOMES`), for the card.

Like automatic rows, these come from every solution of the project the sources labeled; the
annotation filters (generations, date, QC) do not apply. The human word in a consensus is
`sources`' (every trainable annotation's, majority), never a judge's or a rollout's.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import QuerySet

from annotate.labeling import sources
from annotate.models import Annotation, AutoStepLabel, Project, Solution
from annotate.pool.exporting.formats.base import ExportTally
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions


@dataclass(frozen=True)
class SourcedStep:
    text: str
    good: bool | None  # None: no label (a silent judge, a dropped or a past-the-end step)
    soft: float | None  # P(good): the judge's, or 1.0 / 0.0 agreed
    critique: str = ""


@dataclass(frozen=True)
class SourcedSolution:
    solution: Solution
    steps: list[SourcedStep]
    source: str  # "judge" or "consensus": the rows' `label_source`

    def labeled_prefix(self) -> list[SourcedStep]:
        """The steps up to the first one without a label: what a row of step prefixes can hold."""
        prefix = []
        for step in self.steps:
            if step.good is None:
                break
            prefix.append(step)
        return prefix


def _labeled_by(project: Project, names) -> QuerySet[Solution]:
    qs = Solution.objects.filter(project=project)
    labels = {"rollouts": AutoStepLabel.objects.rollouts(), "judge": AutoStepLabel.objects.judged()}
    for name in names:
        if name == "human":
            qs = qs.filter(pk__in=Annotation.objects.trainable().filter(project=project).values("solution_id"))
        else:
            qs = qs.filter(pk__in=labels[name].filter(step__solution__project=project).values("step__solution_id"))
    return qs


def labeled_solutions(project: Project, options: ExportOptions) -> QuerySet[Solution]:
    """The project's solutions every source of the export labeled (a consensus needs them all)."""
    names = ("judge",) if options.labels == "judge" else options.consensus
    return _labeled_by(project, names)


def count_solutions(project: Project, options: ExportOptions) -> int:
    return labeled_solutions(project, options).count()


def solutions(*, project: Project, options: ExportOptions, tally: ExportTally,
              chunk_size: int = CHUNK_SIZE) -> Iterator[SourcedSolution]:
    """The labeled solutions in id order, a page at a time, each step with its judge or agreed label."""
    all_ids = list(labeled_solutions(project, options).order_by("id").values_list("id", flat=True))
    for start in range(0, len(all_ids), chunk_size):
        ids = all_ids[start:start + chunk_size]
        found = Solution.objects.select_related("problem").in_bulk(ids)
        words = sources.for_solutions(ids)
        for solution_id in ids:
            tally.read += 1
            steps = words.get(solution_id, [])
            labeled = _judged(steps) if options.labels == "judge" else _agreed(steps, options.consensus, tally)
            yield SourcedSolution(found[solution_id], labeled, options.labels)


def _judged(steps: list[sources.StepSources]) -> list[SourcedStep]:
    return [SourcedStep(step.text, None, None) if step.judge is None
            else SourcedStep(step.text, step.judge.good, step.judge.soft, step.judge.critique) for step in steps]


def _agreed(steps: list[sources.StepSources], names: tuple[str, ...], tally: ExportTally) -> list[SourcedStep]:
    """Each step's agreed label, None where dropped; nothing after the first agreed bad step."""
    labeled: list[SourcedStep] = []
    ended = False
    for step in steps:
        if ended:
            tally.consensus["after_first_error"] += 1
            labeled.append(SourcedStep(step.text, None, None))
            continue
        tally.consensus["seen"] += 1
        agreed = sources.consensus(step, names)
        tally.consensus[_outcome(step, names, agreed)] += 1
        labeled.append(SourcedStep(step.text, agreed, None if agreed is None else float(agreed)))
        ended = agreed is False
    return labeled


def _outcome(step: sources.StepSources, names: tuple[str, ...], agreed: bool | None) -> str:
    if agreed is not None:
        return "kept_good" if agreed else "kept_bad"
    return "silent" if any(step.verdict(name) is None for name in names) else "disagreed"
