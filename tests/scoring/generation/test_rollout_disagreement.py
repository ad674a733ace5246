"""Rollout disagreement as a selection reason: where Math-Shepherd / OmegaPRM rollout labels and
the model's step scores disagree most, a labeler looks first; solutions without rollouts are
left to the other reasons."""
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotate.models import AutoLabelRun, AutoStepLabel, Project, QueueItem
from infra.env import env_shares
from scoring.models import ModelVersion, SolutionScore, StepScore
from scoring.rescoring import selection
from tests.factories import SolutionFactory

ROLLOUTS_ONLY = {"rollout_disagreement": 1.0}


@pytest.fixture
def version(db):
    return ModelVersion.objects.create(name="v1", path="/nowhere", weights_sha256="0" * 64)


def scored(version, ps):
    """A wrong-answer solution whose steps this version scored `ps`."""
    solution = SolutionFactory(is_correct=False, steps=[f"Step {i}." for i in range(len(ps))])
    product = 1.0
    for step, p in zip(solution.steps.order_by("index"), ps):
        StepScore.objects.create(step=step, model_version=version, p=p)
        product *= p
    SolutionScore.objects.create(solution=solution, model_version=version, product=product, min=min(ps),
                                 last=ps[-1], mean=sum(ps) / len(ps))
    return solution


def rolled_out(solution, counts, *, method=AutoLabelRun.Method.MATH_SHEPHERD, n=4):
    """A rollout run giving each step `k` of `n` continuations that reached the answer."""
    run = AutoLabelRun.objects.create(method=method, source="tiny-generator", params={"n": n})
    AutoStepLabel.objects.bulk_create(
        AutoStepLabel(run=run, step=step, n_rollouts=n, n_correct=k, soft=k / n)
        for step, k in zip(solution.steps.order_by("index"), counts)
    )
    return run


def rebuild(version, shares=ROLLOUTS_ONLY, size=3):
    generation = selection.rebuild_queue(
        model_version=version, project=Project.objects.sole(),
        policy=selection.Policy(size=size, shares=shares, per_problem=9, seed=0))
    return list(QueueItem.objects.filter(generation=generation.number).order_by("-priority", "id"))


def test_the_solution_where_rollouts_and_model_disagree_most_is_served_first(version):
    # The model trusts step 1; no rollout from its prefix reaches the answer: |0 - 0.95| = 0.95.
    missed_error = scored(version, [0.9, 0.95, 0.9])
    rolled_out(missed_error, [4, 0, 0])
    # Both see the error at step 1; only step 0 can disagree, by |0.75 - 0.9| = 0.15.
    agreed = scored(version, [0.9, 0.1, 0.9])
    rolled_out(agreed, [3, 0, 0])
    never_rolled_out = scored(version, [0.5, 0.5, 0.5])
    items = rebuild(version)
    by_reason = {reason: [i.solution_id for i in items if i.reason == reason] for reason in {i.reason for i in items}}
    assert by_reason["rollout_disagreement"] == [missed_error.pk, agreed.pk]
    # Without rollout labels it is not ranked by this reason: the share it cannot fill goes to random.
    assert by_reason["random"] == [never_rolled_out.pk]


def test_candidates_carry_the_rule_over_the_latest_rollout_run_only(version):
    solution = scored(version, [0.9, 0.95, 0.9])
    rolled_out(solution, [4, 0, 0])  # an older run that saw an error the model missed
    rolled_out(solution, [4, 4, 3], method=AutoLabelRun.Method.OMEGAPRM)
    imported = scored(version, [0.9, 0.9, 0.9])
    rolled_out(imported, [0, 0, 0], method=AutoLabelRun.Method.IMPORTED, n=1)
    by_id = {c.solution_id: c for c in selection.candidates(model_version=version, project=Project.objects.sole())}
    assert by_id[solution.pk].rollout_disagreement == pytest.approx(
        selection.rollout_disagreement([1.0, 1.0, 0.75], [0.9, 0.95, 0.9]))
    assert by_id[solution.pk].rollout_disagreement == pytest.approx(0.15)
    # Imported verdicts are not rollouts.
    assert by_id[imported.pk].rollout_disagreement is None


def test_a_solution_this_version_has_not_scored_gets_no_rollout_disagreement(version):
    unscored = SolutionFactory(is_correct=False)
    rolled_out(unscored, [4, 0, 0])
    [candidate] = selection.candidates(model_version=version, project=Project.objects.sole())
    assert candidate.solution_id == unscored.pk and candidate.rollout_disagreement is None


def test_the_pool_rollout_labels_are_read_in_one_query_whatever_the_pool_size(version):
    def queries_for(n_solutions):
        for _ in range(n_solutions):
            rolled_out(scored(version, [0.9, 0.8, 0.7]), [4, 2, 0])
        with CaptureQueriesContext(connection) as captured:
            pool = selection.candidates(model_version=version, project=Project.objects.sole())
        assert all(c.rollout_disagreement is not None for c in pool)
        return len(captured)

    assert queries_for(1) == queries_for(5)


def test_the_rule_looks_only_up_to_the_first_error_either_side_sees():
    # The PRM calls step 1 wrong and the rollouts agree: later steps (rollouts fail, PRM says good) don't count.
    assert selection.rollout_disagreement([1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.9, 0.9]) == pytest.approx(0.1)
    # The PRM misses the error at step 1: that step is the disagreement.
    assert selection.rollout_disagreement([1.0, 0.0, 0.0], [0.9, 0.8, 0.9]) == pytest.approx(0.8)


def test_the_shares_setting_takes_the_reason_and_names_an_unknown_one(monkeypatch):
    monkeypatch.setenv("STEPWISE_SELECTION_SHARES", "rollout_disagreement=1,random=1")
    assert env_shares("STEPWISE_SELECTION_SHARES", "random=1") == {"rollout_disagreement": 0.5, "random": 0.5}
    monkeypatch.setenv("STEPWISE_SELECTION_SHARES", "rollout_disagrement=1")
    with pytest.raises(ImproperlyConfigured, match="STEPWISE_SELECTION_SHARES: .*unknown reason 'rollout_disagrement'"):
        selection.check_shares_setting(env_shares("STEPWISE_SELECTION_SHARES", "random=1"))
