"""The labels as rows the models learn from: what training runs, the promotion gate and the
selection ensemble all read (human verdicts and automatic step labels per solution, the pool's
answer strata the rows are reweighted to, and the feature cache they share)."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, F

from annotate.labeling import sources, verdicts
from annotate.models import Annotation, AutoStepLabel, Project, Solution, Step
from scoring.core.training_data import LABEL_SOURCES, LabeledRow, stratum_weights

if TYPE_CHECKING:
    from scoring.core.training import FeatureCache


def gather_rows(*, project: Project | None = None, solution_ids=None, labels: str = "human") -> list[LabeledRow]:
    """Every labeled solution of the project as a LabeledRow, from the labels `labels` names
    (TrainConfig.labels), reweighted to the project's pool. No project: the sole one (an error
    naming the choices when there are several), as for every `project` column's default.

    "human": one rating list per trainable annotation. Each rating is the verdict of the
    pool's own step, the text the row trains on (`annotate.labeling.verdicts`' `pool_path`: a step
    the annotator rewrote keeps its -1, a reviewer's override wins), given up to and
    including the first error; steps after it carry None (no label), as in PRM800K.
    "automatic": the AutoStepLabels of every run as (K, N) counts per step
    (`AutoStepLabel.counts`; several runs of one step add up). "both": a row carries both.
    "judge": the latest judge run's verdict on each step it spoke on, as one vote. "consensus":
    one vote on each step where the rollouts' and the judge's verdicts agree, the other steps
    unlabeled. Both read the verdicts from `annotate.labeling.sources`, as the review page and
    the sources page do. Judge labels never enter "automatic" or "both".
    """
    if labels not in LABEL_SOURCES:
        raise ValueError(f"labels={labels!r}; expected one of {', '.join(LABEL_SOURCES)}")
    project = project or Project.objects.sole()
    ratings = human_ratings(project=project, solution_ids=solution_ids) if labels in ("human", "both") else {}
    counts = COUNTS[labels](project=project, solution_ids=solution_ids) if labels in COUNTS else {}
    labeled = sorted(set(ratings) | set(counts))
    solutions = list(Solution.objects.filter(pk__in=labeled).select_related("problem").order_by("pk"))
    texts = step_texts(labeled)
    weights = stratum_weights([s.is_correct for s in solutions], pool_strata(project))
    result = []
    for solution, weight in zip(solutions, weights):
        steps = texts.get(solution.pk, [])
        by_index = counts.get(solution.pk, {})
        result.append(LabeledRow(
            solution_id=solution.pk, problem_id=solution.problem_id, problem=solution.problem.statement,
            steps=tuple(steps), ratings=ratings.get(solution.pk, ()), weight=weight,
            counts=tuple(by_index.get(index, (0, 0)) for index in range(len(steps))) if by_index else (),
        ))
    return result


def human_ratings(*, project: Project | None = None,
                  solution_ids=None) -> dict[int, tuple[tuple[int | None, ...], ...]]:
    """Per solution of the project, one rating list per trainable annotation (in annotation order).

    An annotation whose labels may not leave Stepwise is left out by the export's own rule
    (`Verdicts.withheld`: a finish reason its ratings contradict), so a model never learns
    from labels no export would hand out.
    """
    annotations = Annotation.objects.trainable().filter(project=project or Project.objects.sole())
    if solution_ids is not None:
        annotations = annotations.filter(solution_id__in=solution_ids)
    finished = {pk: (solution_id, reason) for pk, solution_id, reason
                in annotations.values_list("pk", "solution_id", "finish_reason")}
    labeled: dict[int, list[tuple[int, verdicts.Verdicts]]] = defaultdict(list)
    for annotation_id, verdict in verdicts.verdicts_by_annotation(annotations).items():
        solution_id, finish_reason = finished.get(annotation_id, (None, None))  # None: submitted since
        if solution_id is not None and verdict.withheld(finish_reason) is None:
            labeled[solution_id].append((annotation_id, verdict))
    return {solution_id: tuple(verdict.pool_path for _, verdict in sorted(pairs, key=lambda pair: pair[0]))
            for solution_id, pairs in labeled.items()}


def automatic_counts(*, project: Project, solution_ids=None) -> dict[int, dict[int, tuple[int, int]]]:
    """Per solution of the project, step index -> (K, N) summed over every automatic label of that step."""
    labels = AutoStepLabel.objects.automatic().filter(step__solution__project=project).annotate(
        solution_id=F("step__solution_id"), index=F("step__index"))
    if solution_ids is not None:
        labels = labels.filter(step__solution_id__in=solution_ids)
    found: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    for label in labels.only("n_rollouts", "n_correct", "soft").iterator(chunk_size=5000):
        k, n = label.counts
        old_k, old_n = found[label.solution_id].get(label.index, (0, 0))
        found[label.solution_id][label.index] = (old_k + k, old_n + n)
    return found


def judge_counts(*, project: Project, solution_ids=None) -> dict[int, dict[int, tuple[int, int]]]:
    """Per judged solution of the project, step index -> (1, 1) or (0, 1): the judge's verdict as one vote.

    One vote, not the judge's soft p: a verdict read from logprobs is often near 0 or 1 anyway,
    and a vote keeps judge labels on the scale of a human rating (K of N whole labels)."""
    return verdict_counts(project=project, solution_ids=solution_ids, verdict=lambda step: step.verdict("judge"))


def consensus_counts(*, project: Project, solution_ids=None) -> dict[int, dict[int, tuple[int, int]]]:
    """Per judged solution, step index -> one vote of the verdict rollouts and the judge share
    (`sources.consensus`); a step where they differ, or one of them is silent, has no label."""
    return verdict_counts(project=project, solution_ids=solution_ids,
                          verdict=lambda step: sources.consensus(step, CONSENSUS_SOURCES))


def verdict_counts(*, project: Project, solution_ids, verdict) -> dict[int, dict[int, tuple[int, int]]]:
    """Per judged solution, step index -> (K, 1) for each step where `verdict(StepSources)` says something."""
    judged = AutoStepLabel.objects.judged().filter(step__solution__project=project)
    if solution_ids is not None:
        judged = judged.filter(step__solution_id__in=solution_ids)
    ids = sorted(judged.order_by().values_list("step__solution_id", flat=True).distinct())
    found: dict[int, dict[int, tuple[int, int]]] = {}
    for start in range(0, len(ids), VERDICT_CHUNK):
        for solution_id, steps in sources.for_solutions(ids[start:start + VERDICT_CHUNK]).items():
            said = {step.index: verdict(step) for step in steps}
            votes = {index: (int(good), 1) for index, good in said.items() if good is not None}
            if votes:
                found[solution_id] = votes
    return found


# Qwen's consensus filtering (arXiv 2501.07301): a step keeps its label where these agree.
CONSENSUS_SOURCES = ("rollouts", "judge")
VERDICT_CHUNK = 2000  # solutions per read of every source's word: bounded IN lists and memory
COUNTS = {"automatic": automatic_counts, "both": automatic_counts, "judge": judge_counts,
          "consensus": consensus_counts}


def step_texts(solution_ids) -> dict[int, list[str]]:
    texts: dict[int, list[str]] = defaultdict(list)
    rows = Step.objects.filter(solution_id__in=solution_ids).order_by("solution_id", "index")
    for solution_id, text in rows.values_list("solution_id", "text").iterator(chunk_size=5000):
        texts[solution_id].append(text)
    return texts


def pool_strata(project: Project) -> dict[bool | None, int]:
    """How the project's pool splits by answer correctness: the mix its labels are reweighted to."""
    pool = Solution.objects.filter(project=project, is_reference=False, is_gold=False)
    return {row["is_correct"]: row["n"] for row in pool.values("is_correct").annotate(n=Count("pk"))}


def feature_cache() -> FeatureCache:
    """The app's feature cache, under the data dir (settings.FEATURE_CACHE_DIR)."""
    from scoring.core.training import FeatureCache  # torch: never imported by the web process

    return FeatureCache(settings.FEATURE_CACHE_DIR)
