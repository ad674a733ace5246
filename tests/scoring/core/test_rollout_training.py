"""Training chooses its labels: human (default), automatic (rollout counts) or both, never mixed silently."""
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from annotate.models import AutoLabelRun, AutoStepLabel, Project
from bench.tiny import build_tiny_backbone, build_tiny_generator
from scoring.core.prm import META_NAME, StepHead, save_head_model
from scoring.core.training_data import LabeledRow, TrainConfig, build_examples, validation_problems
from scoring.generation import rollout_labeling
from scoring.generation.generators import SamplingParams
from scoring.models import TrainingRun
from scoring.rescoring import label_rows
from scoring.store import registry
from tests.annotations import annotate
from tests.factories import ProblemFactory, SolutionFactory


@pytest.fixture(autouse=True)
def fresh_model_cache():
    registry.forget_loaded()
    yield
    registry.forget_loaded()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny backbone for the PRM and a tiny generator that ends every completion at once."""
    root = tmp_path_factory.mktemp("rollout-training")
    return build_tiny_backbone(root / "backbone"), build_tiny_generator(root / "generator", ends_at_once=True)


@pytest.fixture
def current_model(db, tmp_path, folders):
    backbone = folders[0]
    folder = save_head_model(tmp_path / "current", head=StepHead(32, "point"), backbone=str(backbone.resolve()),
                             layer=1)
    return registry.register_model_version(name="current", path=folder, make_current=True)


@pytest.fixture
def rollout_labeled_pool(db, folders):
    """Six problems whose solutions claim the right answer and then, in some, a wrong one, labeled
    by Math-Shepherd rollouts of a real (tiny) generator."""
    solutions = []
    for p in range(6):
        problem = ProblemFactory(statement=f"Problem {p}: what is {p} + {p}?", ground_truth_answer=str(2 * p))
        for wrong_from in (1, 3):
            claims = [2 * p if i < wrong_from else 2 * p + 1 for i in range(3)]
            solutions.append(SolutionFactory(problem=problem, is_correct=wrong_from == 3,
                                             steps=[f"Step {i}: so the answer is {c}" for i, c in enumerate(claims)]))
    job = rollout_labeling.start_rollout_labeling(
        project=Project.objects.sole(),
        method="math_shepherd", n=4, solution_ids=[s.pk for s in solutions], params=SamplingParams(n=4, seed=0),
        generator_spec={"backend": "local", "model": str(folders[1])},
        enqueue=False)
    assert rollout_labeling.run_rollout_job(job_id=job.pk).state == "succeeded"
    return solutions


def row(counts, ratings=()):
    return LabeledRow(solution_id=1, problem_id=1, problem="p", steps=("a", "b", "c"), ratings=ratings,
                      counts=tuple(counts))


def test_automatic_counts_add_to_human_ratings_step_by_step():
    [example] = build_examples([row([(3, 4), (0, 4), (0, 0)], ratings=((1, -1, None),))])
    assert (example.k, example.n) == ([4, 0, 0], [5, 5, 0])
    assert (example.human_labels, example.automatic_labels) == (2, 8)


def test_the_label_source_is_validated_by_name():
    with pytest.raises(ValueError, match="labels='robots'"):
        TrainConfig.from_dict({"labels": "robots"})


def test_rows_carry_rollout_counts_and_inferred_labels_as_one_vote(rollout_labeled_pool):
    solution = rollout_labeled_pool[0]  # right at step 0, wrong from step 1
    by_id = {r.solution_id: r for r in label_rows.gather_rows(labels="automatic")}
    assert by_id[solution.pk].counts == ((4, 4), (0, 4), (0, 4)) and by_id[solution.pk].ratings == ()
    assert label_rows.gather_rows(labels="human") == []
    # An inferred (or imported) label has no counts: it trains as one vote, round(soft) of 1.
    run = AutoLabelRun.objects.create(method=AutoLabelRun.Method.OMEGAPRM)
    first = solution.steps.get(index=0)
    AutoStepLabel.objects.create(run=run, step=first, soft=1.0)
    [row_] = label_rows.gather_rows(labels="automatic", solution_ids=[solution.pk])
    assert row_.counts[0] == (5, 5)


def train_inline(*args) -> dict:
    call_command("train_prm", "--inline", "--head", "beta", "--epochs", "30", "--set", "lr=0.03",
                 "--set", "val_fraction=0.3", *args)
    run = TrainingRun.objects.latest("created_at")
    assert run.state == "succeeded", run.log
    return json.loads((Path(run.result.path) / META_NAME).read_text())


def test_a_beta_prm_trains_on_rollout_counts_and_says_so(current_model, rollout_labeled_pool, capsys):
    meta = train_inline("--labels", "automatic")
    data = meta["data"]
    assert meta["config"]["labels"] == "automatic"
    assert data["train"]["human_labels"] == data["val"]["human_labels"] == 0
    total = sum(label.n_rollouts for label in AutoStepLabel.objects.all())
    assert data["train"]["automatic_labels"] + data["val"]["automatic_labels"] == total
    run = TrainingRun.objects.latest("created_at")
    assert "0 human and" in run.log and f"{total} automatic step labels" in run.log
    # The beta head learned from the counts: its mean follows K/N. A tiny backbone in 30 epochs
    # separates them weakly, so each trained problem's right solution is compared with its wrong
    # one (the two differ only in the claims of steps 2 and 3), and the gaps are averaged: which
    # problems are held out follows from their ids, which earlier tests' rows move.
    held_out = validation_problems([s.problem_id for s in rollout_labeled_pool], val_fraction=0.3,
                                   seed=TrainConfig().seed)
    trained = [s for s in rollout_labeled_pool if s.problem_id not in held_out]
    version = registry.load(run.result)
    scores = version.step_probabilities([(s.problem.statement, [t.text for t in s.steps.order_by("index")])
                                         for s in trained])
    later = {}  # (problem, right?) -> the mean of steps 2 and 3: right in a correct solution, wrong otherwise
    for solution, steps in zip(trained, scores, strict=True):
        later[solution.problem_id, solution.is_correct] = sum(step.mean for step in steps[1:]) / 2
    gaps = [later[problem, True] - later[problem, False] for problem, right in later if right]
    assert sum(gaps) / len(gaps) > 0, later


def test_both_trains_on_human_and_automatic_labels_and_counts_each(current_model, rollout_labeled_pool):
    for solution in rollout_labeled_pool[:4]:
        annotate(solution, [1, -1] if not solution.is_correct else [1, 1, 1], labeler=f"l{solution.pk}")
    meta = train_inline("--labels", "both")
    human = meta["data"]["train"]["human_labels"] + meta["data"]["val"]["human_labels"]
    automatic = meta["data"]["train"]["automatic_labels"] + meta["data"]["val"]["automatic_labels"]
    assert human == 2 + 3 + 2 + 3 and automatic == 12 * 3 * 4
    human_only = train_inline()  # the default stays today's behaviour: human labels only
    assert human_only["config"]["labels"] == "human"
    assert human_only["data"]["train"]["automatic_labels"] == human_only["data"]["val"]["automatic_labels"] == 0


def test_judge_and_consensus_runs_train_on_their_votes_and_no_human_label(current_model, rollout_labeled_pool):
    annotate(rollout_labeled_pool[0], [1, -1], labeler="someone")  # a human label that neither run may read
    judge = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE)
    for solution in rollout_labeled_pool:  # the judge calls the first step good, the second bad, then stops
        for step, p in zip(solution.steps.order_by("index"), (0.9, 0.2)):
            AutoStepLabel.objects.create(run=judge, step=step, soft=p, critique="checked")
    rows = {r.solution_id: r for r in label_rows.gather_rows(labels="consensus")}
    agreed = sum(n for row in rows.values() for _, n in row.counts)
    for labels, expected in (("judge", 2 * len(rollout_labeled_pool)), ("consensus", agreed)):
        data = train_inline("--labels", labels)["data"]
        assert data["train"]["human_labels"] + data["val"]["human_labels"] == 0
        assert data["train"]["automatic_labels"] + data["val"]["automatic_labels"] == expected
    assert 0 < agreed < 2 * len(rollout_labeled_pool)  # rollouts call some second steps good
