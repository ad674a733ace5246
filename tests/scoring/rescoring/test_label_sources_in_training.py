"""Training learns from judge verdicts and consensus labels only when asked: judge and rollout
labels never count as human labels, and "automatic" never includes the judge."""
import pytest
from django.core.management import call_command

from annotate.models import AutoLabelRun, AutoStepLabel
from scoring.core.training_data import TrainConfig, build_examples
from scoring.rescoring import label_rows
from scoring.web.training_views import StartRunForm
from tests.annotations import annotate
from tests.factories import ProblemFactory, SolutionFactory


def label(run, solution, soft_by_step, *, rollouts=None, critique=""):
    """One machine label per step: a judge's P(good), or rollouts' K of `rollouts`."""
    for step, value in zip(solution.steps.order_by("index"), soft_by_step):
        if rollouts:
            AutoStepLabel.objects.create(run=run, step=step, soft=value / rollouts, n_correct=value,
                                         n_rollouts=rollouts)
        else:
            AutoStepLabel.objects.create(run=run, step=step, soft=value, critique=critique)


@pytest.fixture
def pool(db):
    """Three 3-step solutions. Human ratings on the first; rollouts (K of 4) and a judge on the
    first two; the third only rollouts. Where they agree (solution 1, solution 2):
        solution 1: rollouts good, good, bad   judge good, bad, bad   -> agree on steps 0 and 2
        solution 2: rollouts good, bad, bad    judge good, bad, bad   -> agree on all three
    """
    problem = ProblemFactory()
    one, two, three = (SolutionFactory(problem=problem, steps=[f"s{n} step {i}" for i in range(3)])
                       for n in range(3))
    annotate(one, [1, 1, -1])
    rollouts = AutoLabelRun.objects.create(method=AutoLabelRun.Method.MATH_SHEPHERD)
    label(rollouts, one, [4, 2, 0], rollouts=4)
    label(rollouts, two, [3, 0, 0], rollouts=4)
    label(rollouts, three, [4, 4, 4], rollouts=4)
    judge = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE)
    label(judge, one, [0.9, 0.2, 0.1], critique="the sum is off")
    label(judge, two, [0.8, 0.3, 0.05])
    return one, two, three


def counts_by_solution(labels):
    return {row.solution_id: row.counts for row in label_rows.gather_rows(labels=labels)}


def test_human_rows_are_the_same_with_or_without_machine_labels(pool):
    with_machines = label_rows.gather_rows(labels="human")
    AutoStepLabel.objects.all().delete()
    assert with_machines == label_rows.gather_rows(labels="human")
    assert [row.counts for row in with_machines] == [()]


def test_automatic_labels_leave_the_judge_out(pool):
    one, two, three = pool
    assert counts_by_solution("automatic") == {one.pk: ((4, 4), (2, 4), (0, 4)), two.pk: ((3, 4), (0, 4), (0, 4)),
                                               three.pk: ((4, 4), (4, 4), (4, 4))}
    [example] = [e for e in build_examples(label_rows.gather_rows(labels="both")) if e.row.solution_id == one.pk]
    assert (example.human_labels, example.automatic_labels) == (3, 12)


def test_judge_labels_are_one_vote_a_step_and_never_human(pool):
    one, two, _ = pool
    assert counts_by_solution("judge") == {one.pk: ((1, 1), (0, 1), (0, 1)), two.pk: ((1, 1), (0, 1), (0, 1))}
    examples = build_examples(label_rows.gather_rows(labels="judge"))
    assert all(e.row.ratings == () and e.human_labels == 0 for e in examples)


def test_consensus_keeps_only_the_steps_rollouts_and_the_judge_agree_on(pool):
    one, two, _ = pool
    assert counts_by_solution("consensus") == {one.pk: ((1, 1), (0, 0), (0, 1)),
                                               two.pk: ((1, 1), (0, 1), (0, 1))}
    examples = {e.row.solution_id: e for e in build_examples(label_rows.gather_rows(labels="consensus"))}
    assert examples[one.pk].labeled_steps == 2 and examples[one.pk].human_labels == 0


def test_the_latest_judge_run_speaks_for_a_solution(pool):
    one, _, _ = pool
    later = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE)
    label(later, one, [0.9, 0.9, 0.9])
    [row] = label_rows.gather_rows(labels="judge", solution_ids=[one.pk])
    assert row.counts == ((1, 1), (1, 1), (1, 1))


@pytest.mark.parametrize("labels", ["judge", "consensus"])
def test_judge_and_consensus_are_training_choices_everywhere(labels, db):
    assert TrainConfig.from_dict({"labels": labels}).labels == labels
    form = StartRunForm({"head": "point", "mode": "head", "epochs": 3, "labels": labels, "gate_metric": "step_auc"})
    assert form.is_valid(), form.errors
    assert form.options()["train"]["labels"] == labels


def test_train_prm_names_the_judge_and_consensus_choices(capsys):
    with pytest.raises(SystemExit):
        call_command("train_prm", "--help")
    help_text = capsys.readouterr().out
    assert "judge" in help_text and "consensus" in help_text
