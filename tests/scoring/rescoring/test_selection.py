"""Selection: the queue rebuilt after a rescore, convincing wrong answers first, mixed with others."""
from collections import Counter

import pytest

from annotate.models import Annotation, Generation, LabelingConfig, Project, QueueItem
from scoring.models import ModelVersion, SolutionScore
from scoring.rescoring import selection
from tests.factories import ProblemFactory, SolutionFactory
from tests.scoring.projects import solution_in, two_projects

# The mix these tests specify: every non-ensemble reason at once (the default is half convincing
# wrong, half random, tested below; the ensemble reasons are specified in test_active_learning_scale.py).
MIX = {"convincing_wrong": 0.4, "convincing": 0.2, "uncertain": 0.1, "random": 0.3}


def here() -> Project:
    """The project these tests select in: the only one."""
    return Project.objects.sole()


def rebuild(version: ModelVersion, **policy) -> Generation:
    """The queue rebuilt in this project by `version`, with the project's policy but `policy`."""
    return selection.rebuild_queue(model_version=version, project=here(), policy=selection.Policy.of(here(), **policy))


def configure(project: Project, **settings) -> None:
    LabelingConfig.objects.update_or_create(project=project, defaults=settings)


@pytest.fixture(autouse=True)
def mixed_shares(db):
    configure(here(), selection_shares=MIX)


@pytest.fixture
def version(db):
    return ModelVersion.objects.create(name="v1", path="/nowhere", weights_sha256="0" * 64)


def scored(version, *, score, is_correct, problem=None, sigma=None):
    solution = SolutionFactory(is_correct=is_correct, **({"problem": problem} if problem else {}))
    SolutionScore.objects.create(
        solution=solution, model_version=version, product=score, min=score, last=score, mean=score, sigma=sigma
    )
    return solution


@pytest.fixture
def fixture_pool(version):
    """Forty problems with a right and a wrong solution each; one wrong answer is very convincing."""
    pool = []
    for n in range(40):
        problem = ProblemFactory()
        pool.append(scored(version, score=0.2 + n / 100, is_correct=True, problem=problem))
        pool.append(scored(version, score=0.1 + n / 200, is_correct=False, problem=problem))
    convincing_wrong = scored(version, score=0.97, is_correct=False)
    return pool, convincing_wrong


def served_order(generation: Generation) -> list[QueueItem]:
    items = QueueItem.objects.filter(project=generation.project_id, generation=generation.number)
    return list(items.order_by("-priority", "id"))


def test_a_convincing_wrong_answer_is_served_first(version, fixture_pool):
    _, convincing_wrong = fixture_pool
    generation = rebuild(version, size=20, seed=1)
    first = served_order(generation)[0]
    assert first.solution_id == convincing_wrong.pk
    assert first.reason == "convincing_wrong"
    assert first.score_at_selection == pytest.approx(0.97)
    assert first.model_version_name == "v1"
    assert generation.model_version_name == "v1"


def test_shares_decide_how_many_items_each_reason_gets(version, fixture_pool):
    policy = selection.Policy.of(here(), size=40, seed=2, per_problem=2,
                              shares=selection.parse_shares("convincing_wrong=2,convincing=1,random=1"))
    generation = selection.rebuild_queue(model_version=version, project=here(), policy=policy)
    counts = Counter(item.reason for item in served_order(generation))
    assert counts == {"convincing_wrong": 20, "convincing": 10, "random": 10}


def test_reasons_are_interleaved_not_served_in_blocks(version, fixture_pool):
    generation = rebuild(version, size=40, seed=3)
    first_ten = {item.reason for item in served_order(generation)[:10]}
    assert {"convincing_wrong", "convincing", "random"} <= first_ten


def test_default_shares_keep_a_random_share(version, fixture_pool):
    policy = selection.Policy.of(here(), size=40, seed=4)
    assert policy.shares["random"] > 0
    generation = selection.rebuild_queue(model_version=version, project=here(), policy=policy)
    reasons = Counter(item.reason for item in served_order(generation))
    # No sigma in this pool: the uncertainty quota falls back to random picks too.
    assert reasons["random"] >= round(0.3 * 40)
    assert reasons["convincing_wrong"] < 40


def test_uncertainty_share_picks_the_widest_sigma(version, fixture_pool):
    unsure = scored(version, score=0.5, is_correct=True, sigma=0.4)
    scored(version, score=0.5, is_correct=True, sigma=0.01)
    policy = selection.Policy.of(here(), size=10, seed=5, shares={"uncertain": 1.0})
    generation = selection.rebuild_queue(model_version=version, project=here(), policy=policy)
    items = served_order(generation)
    assert (items[0].solution_id, items[0].reason) == (unsure.pk, "uncertain")


def test_no_problem_gets_more_than_its_cap(version, fixture_pool):
    problem = ProblemFactory()
    for n in range(6):
        scored(version, score=0.99 - n / 100, is_correct=False, problem=problem)
    generation = rebuild(version, size=60, per_problem=1, seed=6)
    per_problem = Counter(
        item.solution.problem_id
        for item in QueueItem.objects.filter(generation=generation.number).select_related("solution")
    )
    assert max(per_problem.values()) == 1


def test_rebuild_starts_a_new_generation_and_retires_only_waiting_items(version, fixture_pool, annotator):
    pool, _ = fixture_pool
    first = rebuild(version, size=10, seed=7)
    waiting, leased, done = served_order(first)[:3]
    QueueItem.objects.filter(pk=leased.pk).update(status=QueueItem.Status.LEASED, leased_to=annotator)
    QueueItem.objects.filter(pk=done.pk).update(status=QueueItem.Status.DONE)
    qc = QueueItem.objects.create(solution=pool[0], generation=first.number, slot=5, is_quality_control=True)

    second = rebuild(version, size=10, seed=7)
    assert second.number == first.number + 1
    statuses = dict(
        QueueItem.objects.filter(pk__in=[waiting.pk, leased.pk, done.pk, qc.pk]).values_list("pk", "status")
    )
    assert statuses == {waiting.pk: "retired", leased.pk: "leased", done.pk: "done", qc.pk: "available"}
    # What someone holds or finished is not queued again.
    requeued = set(QueueItem.objects.filter(generation=second.number).values_list("solution_id", flat=True))
    assert leased.solution_id not in requeued and done.solution_id not in requeued


def test_labeled_and_gold_solutions_are_not_selected(version, annotator):
    labeled = scored(version, score=0.99, is_correct=False)
    Annotation.objects.create(solution=labeled, labeler="x", status=Annotation.Status.SUBMITTED)
    gold = scored(version, score=0.98, is_correct=False)
    gold.is_gold = True
    gold.save(update_fields=["is_gold"])
    fresh = scored(version, score=0.5, is_correct=False)
    generation = rebuild(version, size=10, seed=8)
    assert [item.solution_id for item in served_order(generation)] == [fresh.pk]


def test_bad_shares_are_reported_by_name():
    with pytest.raises(ValueError, match="unknown reason 'lucky'"):
        selection.parse_shares("convincing_wrong=0.5,lucky=0.5")
    with pytest.raises(ValueError, match="'abc' is not a number"):
        selection.parse_shares("random=abc")
    assert selection.parse_shares("random=1,convincing=3") == {"random": 0.25, "convincing": 0.75}


def test_shares_apply_to_what_the_cap_per_problem_lets_through(version):
    """Ten problems with four solutions each and a cap of two: 20 items, 40 % of them convincing wrong."""
    for n in range(10):
        problem = ProblemFactory()
        for k in range(4):
            scored(version, score=0.5 + n / 100 + k / 1000, is_correct=k % 2 == 0, problem=problem)
    policy = selection.Policy.of(here(), size=100, per_problem=2, seed=9,
                              shares=selection.parse_shares("convincing_wrong=0.4,convincing=0.2,random=0.4"))
    generation = selection.rebuild_queue(model_version=version, project=here(), policy=policy)
    counts = Counter(item.reason for item in served_order(generation))
    assert sum(counts.values()) == 20
    assert counts["convincing_wrong"] == 8


def test_with_overlap_two_different_annotators_label_each_selected_solution_after_a_rescore(version, fixture_pool):
    from annotate.labeling import actions as labeling
    from annotate.labeling import queueing
    from annotate.models import LabelingConfig
    from tests.factories import user_with_role

    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"overlap_k": 2})
    generation = rebuild(version, size=3, seed=10)
    selected = set(QueueItem.objects.filter(generation=generation.number).values_list("solution_id", flat=True))
    assert len(selected) == 3
    labelers: dict[int, set[str]] = {}
    for n in range(4):
        annotator = user_with_role(f"labeler{n}", "annotator")
        while (task := queueing.claim_next(annotator=annotator)) is not None:
            for index in range(task.solution.steps.count()):
                labeling.rate(annotation=task, index=index, rating=1)
            labeling.submit(annotation=task)
            labelers.setdefault(task.solution_id, set()).add(task.labeler)
    assert {solution: len(names) for solution, names in labelers.items()} == dict.fromkeys(selected, 2)


def test_a_rebuilt_queue_is_not_topped_up_past_its_size_by_a_restart(version, fixture_pool):
    from annotate.labeling import queueing

    configure(here(), queue_size=10)
    generation = selection.rebuild_queue(model_version=version, project=here())
    assert QueueItem.objects.filter(generation=generation.number).count() == 10
    queueing.ensure_default_queue()  # what seed_demo and start-up call
    assert QueueItem.objects.filter(generation=generation.number, status="available").count() == 10


def test_solutions_imported_during_a_rescore_stay_queued_after_the_rebuild(version, fixture_pool):
    # Imported (and queued) while the rescore ran, so this model has not scored them.
    from annotate.labeling import queueing

    unscored_wrong = SolutionFactory(is_correct=False)
    unscored_right = SolutionFactory(is_correct=True)
    queueing.enqueue_imported(solution_ids=[unscored_wrong.pk, unscored_right.pk])
    generation = rebuild(version, size=200, seed=3, per_problem=2, shares=selection.parse_shares("convincing_wrong=1"))
    picked = {item.solution_id: item for item in served_order(generation)}
    assert picked[unscored_wrong.pk].score_at_selection is None
    assert picked[unscored_right.pk].reason == "random"  # "convincing" needs a score
    # A wrong answer without a score still counts as wrong, after every scored one.
    wrong = [item for item in served_order(generation) if item.reason == "convincing_wrong"]
    assert wrong[-1].solution_id == unscored_wrong.pk
    assert None not in [item.score_at_selection for item in wrong[:-1]]


def test_once_scored_imported_solutions_are_ranked_by_the_model_like_the_rest(version, fixture_pool):
    from annotate.labeling import queueing

    imported = SolutionFactory(is_correct=False)
    queueing.enqueue_imported(solution_ids=[imported.pk])
    assert QueueItem.objects.get(solution=imported).reason == queueing.IMPORTED_WRONG_REASON
    SolutionScore.objects.create(solution=imported, model_version=version, product=0.99, min=0.99, last=0.99,
                                 mean=0.99)
    generation = rebuild(version, size=20, seed=1)
    first = served_order(generation)[0]
    assert (first.solution_id, first.reason) == (imported.pk, "convincing_wrong")
    assert QueueItem.objects.get(solution=imported, generation=0).status == QueueItem.Status.RETIRED


def test_by_default_convincing_wrong_answers_lead_with_random_exploration_beside_them(
    version, fixture_pool, monkeypatch
):
    from config import settings as configured  # the value settings.py parsed, before any override
    from scoring.rescoring import ensemble

    assert configured.STEPWISE_SELECTION_SHARES == {"convincing_wrong": 0.5, "random": 0.5}
    LabelingConfig.objects.filter(project=here()).delete()  # read again: a new project's, from the environment

    def no_ensemble(*args, **kwargs):
        raise AssertionError("no default reason needs the ensemble")

    monkeypatch.setattr(ensemble, "for_model_version", no_ensemble)
    _, convincing_wrong = fixture_pool
    generation = rebuild(version, size=20, seed=4)
    served = served_order(generation)
    assert Counter(item.reason for item in served) == {"convincing_wrong": 10, "random": 10}
    assert served[0].solution_id == convincing_wrong.pk and served[0].reason == "convincing_wrong"
    assert {item.reason for item in served[:4]} == {"convincing_wrong", "random"}  # side by side, not in blocks


# --- projects -------------------------------------------------------------------------------------


def scored_in(project, version, *, score, is_correct):
    solution = solution_in(project, is_correct=is_correct)
    SolutionScore.objects.create(solution=solution, model_version=version, product=score, min=score, last=score,
                                 mean=score)
    return solution


def test_each_project_selects_from_its_own_pool_into_its_own_queue_by_its_own_settings(version):
    gsm8k, math = two_projects()
    configure(gsm8k, queue_size=3, selection_shares={"convincing_wrong": 1.0})
    configure(math, queue_size=5, selection_shares={"random": 1.0})
    ours = {scored_in(gsm8k, version, score=n / 10, is_correct=n % 2 == 0).pk for n in range(8)}
    theirs = {scored_in(math, version, score=n / 10, is_correct=n % 2 == 0).pk for n in range(8)}
    math_generation = selection.rebuild_queue(model_version=version, project=math)
    math_queue = list(QueueItem.objects.filter(project=math).values_list("pk", "solution_id", "status", "generation"))
    assert {row[1] for row in math_queue} <= theirs and len(math_queue) == 5
    assert {item.reason for item in served_order(math_generation)} == {"random"}

    gsm8k_generation = selection.rebuild_queue(model_version=version, project=gsm8k)
    assert gsm8k_generation.project == gsm8k and math_generation.project == math
    served = list(QueueItem.objects.filter(project=gsm8k, generation=gsm8k_generation.number))
    assert {item.solution_id for item in served} <= ours and len(served) == 3
    assert {item.reason for item in served} == {"convincing_wrong"}
    # The other project's queue is as it was: nothing retired, added or renumbered.
    after = list(QueueItem.objects.filter(project=math).values_list("pk", "solution_id", "status", "generation"))
    assert after == math_queue
