"""Where the machine sources disagree, a person looks first (`sources_disagree`): the judge, the
rollouts and the model's step scores, each read as annotate.labeling.sources reads it; a solution
with one machine source has nothing to compare and is left to the other reasons."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate.labeling import sources
from annotate.models import AutoLabelRun, AutoStepLabel, LabelingConfig, Project, QueueItem
from infra.env import env_shares
from scoring.models import ModelVersion
from scoring.rescoring import selection
from tests.factories import SolutionFactory, store_step_scores

DISAGREE_ONLY = {"sources_disagree": 1.0}


@pytest.fixture
def version(db):
    return ModelVersion.objects.create(name="v1", path="/nowhere", weights_sha256="0" * 64)


def solution_scored(version, ps):
    """A wrong-answer solution whose steps this version scored `ps`."""
    solution = SolutionFactory(is_correct=False, steps=[f"Step {i}." for i in range(len(ps))])
    store_step_scores(version, solution, ps)
    return solution


def judged(solution, ps, critique="the sum is wrong"):
    """A judge run giving each step P(good) `p` and a critique."""
    run = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE, source="tiny-judge")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, soft=p, critique=critique)
                                      for step, p in zip(solution.steps.order_by("index"), ps))
    return run


def rolled_out(solution, counts, n=4):
    """A Math-Shepherd run: `k` of `n` continuations from each step reached the answer."""
    run = AutoLabelRun.objects.create(method=AutoLabelRun.Method.MATH_SHEPHERD, source="tiny-generator")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, n_rollouts=n, n_correct=k, soft=k / n)
                                      for step, k in zip(solution.steps.order_by("index"), counts))


def rebuild(version, shares=DISAGREE_ONLY, size=3):
    generation = selection.rebuild_queue(
        model_version=version, project=Project.objects.sole(),
        policy=selection.Policy(size=size, shares=shares, per_problem=9, seed=0))
    return list(QueueItem.objects.filter(generation=generation.number).order_by("-priority", "id"))


def by_reason(items):
    return {reason: [i.solution_id for i in items if i.reason == reason] for reason in {i.reason for i in items}}


def test_the_solutions_where_the_machine_sources_disagree_most_are_served_first(version):
    # The judge sees an error at step 1 that the model and the rollouts do not: they disagree on
    # whether steps 1 and 2 follow a right prefix (two steps), by at most 1.0 - 0.4 = 0.6.
    two_apart = solution_scored(version, [0.9, 0.9, 0.9])
    judged(two_apart, [0.9, 0.4, 0.9])
    rolled_out(two_apart, [4, 4, 4])
    # The judge sees an error at the last step only: one step, though by a wider 0.97 - 0.02.
    one_apart = solution_scored(version, [0.9, 0.9, 0.97])
    judged(one_apart, [0.9, 0.9, 0.02])
    # Everyone agrees: ranked (two sources speak), last.
    agreed = solution_scored(version, [0.9, 0.9, 0.9])
    judged(agreed, [0.9, 0.9, 0.9])
    items = rebuild(version)
    assert by_reason(items) == {"sources_disagree": [two_apart.pk, one_apart.pk, agreed.pk]}


def test_a_solution_with_a_single_machine_source_is_not_ranked_and_its_share_goes_to_random(version):
    only_the_model = solution_scored(version, [0.9, 0.1, 0.9])
    only_the_judge = SolutionFactory(is_correct=False, steps=["a", "b"])  # never scored by this version
    judged(only_the_judge, [0.9, 0.1])
    split = solution_scored(version, [0.9, 0.9, 0.9])
    judged(split, [0.9, 0.1, 0.9])
    by_id = {c.solution_id: c for c in selection.candidates(model_version=version, project=Project.objects.sole())}
    assert by_id[only_the_model.pk].sources_disagreement is None
    assert by_id[only_the_judge.pk].sources_disagreement is None
    assert by_id[split.pk].sources_disagreement == sources.Disagreement(steps=2, spread=pytest.approx(0.8))
    reasons = by_reason(rebuild(version))
    assert reasons["sources_disagree"] == [split.pk]
    assert set(reasons["random"]) == {only_the_model.pk, only_the_judge.pk}


def test_without_judge_or_rollouts_in_the_pool_the_whole_share_goes_to_random(version):
    pool = {solution_scored(version, [0.9, 0.2]).pk for _ in range(3)}
    items = rebuild(version)
    assert {i.reason for i in items} == {"random"} and {i.solution_id for i in items} == pool


def test_the_share_is_honoured_beside_the_other_reasons(version):
    for _ in range(4):
        judged(solution_scored(version, [0.9, 0.9]), [0.9, 0.1])
    for _ in range(4):
        solution_scored(version, [0.9, 0.9])
    items = rebuild(version, shares={"sources_disagree": 0.5, "random": 0.5}, size=4)
    reasons = [i.reason for i in items]
    assert reasons.count("sources_disagree") == 2 and reasons.count("random") == 2


def step(i, *, judge=None, prm=None, rollout=None):
    """A step as annotate.labeling.sources reads it: the judge's and rollouts' P(good), the model's p."""
    return sources.StepSources(
        index=i, text="", prm=prm,
        judge=None if judge is None else sources.JudgeWord(soft=judge, critique="", good=judge >= 0.5),
        rollout=None if rollout is None else sources.RolloutWord(soft=rollout, n_correct=round(4 * rollout),
                                                                 n_rollouts=4, good=rollout > 0))


def test_the_steps_counted_are_those_between_the_first_errors_the_sources_see():
    # Both see the error at step 1; after it the judge says bad and the model good: no disagreement.
    same_error = [step(0, judge=0.9, prm=0.9), step(1, judge=0.1, prm=0.2), step(2, judge=0.1, prm=0.9)]
    assert sources.disagreement(same_error) == sources.Disagreement(steps=0, spread=pytest.approx(0.1))
    # Rollouts all fail past an error the judge and the model see too: still none.
    rollouts_fail_on = [step(i, judge=j, prm=p, rollout=r)
                        for i, (j, p, r) in enumerate([(0.9, 0.9, 1.0), (0.1, 0.2, 0.0), (0.9, 0.9, 0.0)])]
    assert sources.disagreement(rollouts_fail_on).steps == 0
    # The judge's first error is step 1, the model's step 3: steps 1 and 2 are contested.
    apart = [step(0, judge=0.9, prm=0.9), step(1, judge=0.1, prm=0.8), step(2, judge=0.9, prm=0.9),
             step(3, judge=0.1, prm=0.1)]
    assert sources.disagreement(apart) == sources.Disagreement(steps=2, spread=pytest.approx(0.7))
    # More contested steps outrank a wider spread.
    assert sources.Disagreement(steps=2, spread=0.1) > sources.Disagreement(steps=1, spread=0.9)


def test_one_source_alone_on_every_step_is_not_a_disagreement():
    assert sources.disagreement([step(0, judge=0.9), step(1, prm=0.1)]) is None
    assert sources.disagreement([step(0, prm=0.9), step(1, prm=0.1)]) is None


def test_the_latest_judge_run_is_the_judges_word(version):
    solution = solution_scored(version, [0.9, 0.9])
    judged(solution, [0.9, 0.1])  # an older run that disagreed with the model
    judged(solution, [0.9, 0.9])
    [candidate] = selection.candidates(model_version=version, project=Project.objects.sole())
    assert candidate.sources_disagreement.steps == 0


def test_the_sources_are_read_in_a_number_of_queries_that_does_not_grow_with_the_pool(version):
    def queries_for(n_solutions):
        for _ in range(n_solutions):
            solution = solution_scored(version, [0.9, 0.8, 0.7])
            judged(solution, [0.9, 0.1, 0.9])
            rolled_out(solution, [4, 2, 0])
        with CaptureQueriesContext(connection) as captured:
            pool = selection.candidates(model_version=version, project=Project.objects.sole())
        assert all(c.sources_disagreement is not None for c in pool)
        return len(captured)

    assert queries_for(1) == queries_for(5)


def test_the_reason_is_named_in_the_shares_setting_and_shown_in_words_on_the_queue_page(monkeypatch, client,
                                                                                          reviewer, version):
    monkeypatch.setenv("STEPWISE_SELECTION_SHARES", "sources_disagree=1,random=1")
    shares = env_shares("STEPWISE_SELECTION_SHARES", "random=1")
    selection.check_shares_setting(shares)
    assert shares == {"sources_disagree": 0.5, "random": 0.5}
    judged(solution_scored(version, [0.9, 0.9]), [0.9, 0.1])
    rebuild(version)
    client.force_login(reviewer)
    page = client.get(reverse("scoring:queue")).content.decode()
    assert "the judge, rollouts and the model disagree on a step" in page


def test_a_projects_settings_can_give_the_reason_its_share(version):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(),
                                            defaults={"selection_shares": {"sources_disagree": 1.0}})
    split = solution_scored(version, [0.9, 0.9])
    judged(split, [0.9, 0.1])
    generation = selection.rebuild_queue(model_version=version, project=Project.objects.sole())
    assert list(QueueItem.objects.filter(generation=generation.number).values_list("solution_id", "reason")) == [
        (split.pk, "sources_disagree")]
