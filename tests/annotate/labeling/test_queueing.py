"""The leased queue: who gets what next, leases that lapse, overlap, gold and screening."""
import datetime as dt
import io
import random

import pytest
from django.utils import timezone

from annotate.labeling import actions as labeling
from annotate.labeling import quality, queue_items, queueing, starting, tasks
from annotate.labeling.refusals import LeaseLost
from annotate.models import (
    Annotation,
    Generation,
    LabelingConfig,
    Project,
    QueueItem,
    ScreeningResult,
    Solution,
    StepLabel,
)
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def annotators(n):
    return [user_with_role(f"worker{i}", "annotator") for i in range(n)]


def configure(**fields):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults=fields)


def label_all(annotation, rating=1):
    for index in range(annotation.solution.steps.count()):
        labeling.rate(annotation=annotation, index=index, rating=rating)
    return labeling.submit(annotation=annotation)


def test_default_queue_holds_every_unlabeled_solution_once_and_is_idempotent():
    solutions = SolutionFactory.create_batch(3)
    SolutionFactory(is_gold=True)
    assert queueing.ensure_default_queue() == 3
    assert queueing.ensure_default_queue() == 0
    items = QueueItem.objects.all()
    assert sorted(i.solution_id for i in items) == sorted(s.pk for s in solutions)
    assert {i.reason for i in items} == {queueing.DEFAULT_REASON}


def test_default_queue_makes_k_slots_when_overlap_is_configured():
    configure(overlap_k=3)
    SolutionFactory()
    assert queueing.ensure_default_queue() == 3
    assert sorted(QueueItem.objects.values_list("slot", flat=True)) == [0, 1, 2]


def test_what_waits_is_counted_in_solutions_once_each_without_gold():
    configure(overlap_k=3, qc_rate=0.5)
    SolutionFactory(is_gold=True)
    SolutionFactory.create_batch(2)
    queueing.ensure_default_queue()
    assert QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE).count() > 2
    assert queue_items.available_count() == 2


def test_claim_hands_out_the_highest_priority_item_with_its_steps_ready():
    low, high = SolutionFactory(), SolutionFactory(steps=["a", "b"])
    QueueItem.objects.create(solution=low, generation=0, priority=1.0, reason="low")
    QueueItem.objects.create(solution=high, generation=0, priority=5.0, reason="high")
    (ann,) = annotators(1)
    task = queueing.claim_next(annotator=ann)
    assert task.solution == high
    assert task.queue_item.reason == "high"
    assert task.generation == 0
    assert [c.text for c in tasks.task_view(task).steps] == ["a", "b"]
    item = QueueItem.objects.get(solution=high)
    assert item.status == QueueItem.Status.LEASED and item.leased_to == ann


def test_second_annotator_never_gets_a_claimed_solution():
    SolutionFactory.create_batch(2)
    queueing.ensure_default_queue()
    first, second, third = annotators(3)
    a = queueing.claim_next(annotator=first)
    b = queueing.claim_next(annotator=second)
    assert a.solution_id != b.solution_id
    assert queueing.claim_next(annotator=third) is None


def test_coming_back_resumes_the_open_task_instead_of_opening_another():
    SolutionFactory.create_batch(3)
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    first = queueing.claim_next(annotator=ann)
    assert queueing.claim_next(annotator=ann) == first
    assert Annotation.objects.filter(annotator=ann, status="in_progress").count() == 1
    assert QueueItem.objects.filter(status="leased").count() == 1


def test_a_lapsed_lease_goes_to_the_next_annotator_and_the_first_gets_new_work():
    SolutionFactory.create_batch(2)
    queueing.ensure_default_queue()
    first, second = annotators(2)
    lost = queueing.claim_next(annotator=first)
    later = timezone.now() + dt.timedelta(seconds=LabelingConfig.of(Project.objects.sole()).lease_duration + 1)
    taken = queueing.claim_next(annotator=second, now=later)
    assert taken.solution_id == lost.solution_id
    with pytest.raises(LeaseLost):
        queue_items.renew_lease(annotation=lost, now=later)
    again = queueing.claim_next(annotator=first, now=later)
    assert again.solution_id != lost.solution_id
    assert not Annotation.objects.filter(pk=lost.pk).exists()


def test_with_a_short_lease_a_lapsed_one_comes_back_within_a_tenth_of_it():
    configure(lease_seconds=2)
    SolutionFactory()
    queueing.ensure_default_queue()
    first, second = annotators(2)
    start = timezone.now()
    queueing.claim_next(annotator=first, now=start)
    assert queueing.claim_next(annotator=second, now=start + dt.timedelta(seconds=2.1)).annotator == second


def test_claims_put_lapsed_leases_back_at_most_every_five_seconds():
    SolutionFactory()
    queueing.ensure_default_queue()
    first, second = annotators(2)
    queueing.claim_next(annotator=first)  # Lapsed leases are put back here, then not for 5 s.
    lapsed = timezone.now() + dt.timedelta(seconds=LabelingConfig.of(Project.objects.sole()).lease_duration + 1)
    QueueItem.objects.update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert queueing.claim_next(annotator=second) is None  # Within 5 s of the last: it waits.
    assert queueing.claim_next(annotator=second, now=lapsed).annotator == second


def test_a_lapsed_lease_nobody_took_is_resumed_with_its_ratings():
    SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    task = queueing.claim_next(annotator=ann)
    labeling.rate(annotation=task, index=0, rating=1)
    later = timezone.now() + dt.timedelta(hours=2)
    assert queue_items.expire_leases(now=later) == 1
    assert queueing.claim_next(annotator=ann, now=later) == task
    assert tasks.task_view(task).steps[0].rating == 1
    assert QueueItem.objects.get().status == QueueItem.Status.LEASED


def test_overlap_gives_k_annotators_the_same_solution_each_at_most_once():
    configure(overlap_k=2)
    solution = SolutionFactory()
    queueing.ensure_default_queue()
    first, second, third = annotators(3)
    a = queueing.claim_next(annotator=first)
    label_all(a)
    assert queueing.claim_next(annotator=first) is None  # The other slot is not for them.
    assert queueing.claim_next(annotator=second).solution == solution
    assert queueing.claim_next(annotator=third) is None


def test_submitting_marks_the_item_done():
    SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    label_all(queueing.claim_next(annotator=ann))
    assert QueueItem.objects.get().status == QueueItem.Status.DONE
    assert queue_items.available_count() == 0


def test_release_puts_the_item_back_and_drops_the_draft():
    SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    queue_items.release(annotation=queueing.claim_next(annotator=ann))
    assert QueueItem.objects.get().status == QueueItem.Status.AVAILABLE
    assert not Annotation.objects.exists()


def claimed_in_turn(annotator, n: int) -> list:
    """n tasks the annotator claims one after another, each labeled before the next claim."""
    tasks = []
    for _ in range(n):
        tasks.append(queueing.claim_next(annotator=annotator))
        label_all(tasks[-1])
    return tasks


def test_gold_items_are_interleaved_at_the_configured_rate_and_never_leased(monkeypatch):
    configure(qc_rate=0.5)
    monkeypatch.setattr(queueing._gold_draw, "uniform", lambda low, high: 1.0)  # The draw's middle.
    gold = SolutionFactory(is_gold=True)
    SolutionFactory.create_batch(3)
    queueing.ensure_default_queue()
    first, second = annotators(2)
    served = [task.is_quality_control for task in claimed_in_turn(first, 3)]
    assert served == [False, True, False]
    qc = Annotation.objects.get(annotator=first, is_quality_control=True)
    assert qc.solution == gold and qc.queue_item is None and qc.generation == 0
    # The gold item is everyone's: the second annotator gets it too.
    label_all(queueing.claim_next(annotator=second))
    assert queueing.claim_next(annotator=second).solution == gold


def test_an_annotator_gets_each_gold_item_once_then_ordinary_work():
    configure(qc_rate=1.0)  # gold whenever there is some left for them
    gold = {SolutionFactory(is_gold=True).pk for _ in range(2)}
    ordinary = SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    served = [task.solution_id for task in claimed_in_turn(ann, 3)]
    assert set(served[:2]) == gold and served[2] == ordinary.pk


def test_where_gold_falls_is_drawn_while_its_share_stays_within_two_tasks_of_the_rate(monkeypatch):
    """A fixed period (every fourth task at 25 %) would tell an annotator which task is gold."""
    configure(qc_rate=0.25)
    monkeypatch.setattr(queueing, "_gold_draw", random.Random(5))
    SolutionFactory.create_batch(20, is_gold=True, steps=["a"])
    SolutionFactory.create_batch(40, steps=["a"])
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    served = [task.is_quality_control for task in claimed_in_turn(ann, 40)]
    for so_far in range(1, len(served) + 1):
        gold, ordinary = sum(served[:so_far]), so_far - sum(served[:so_far])
        assert abs(gold - ordinary * 0.25 / 0.75) < 2, served
    positions = [i for i, is_gold in enumerate(served) if is_gold]
    assert len({b - a for a, b in zip(positions, positions[1:])}) > 1, served


def screening_set(ratings_per_solution):
    solutions = []
    for gold in ratings_per_solution:
        solution = SolutionFactory(is_gold=True, steps=[f"step {i}" for i in range(len(gold))])
        for step, rating in zip(solution.steps.order_by("index"), gold):
            step.gold_rating = rating
            step.save()
        QueueItem.objects.create(solution=solution, generation=Generation.SCREENING, is_initial_screening=True)
        solutions.append(solution)
    return solutions


def test_screening_comes_before_real_work_and_passing_opens_the_queue():
    screening = screening_set([[1, 1], [1, -1]])
    real = SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    for _ in screening:
        task = queueing.claim_next(annotator=ann)
        assert task.is_initial_screening and task.generation == Generation.SCREENING
        gold = [s.gold_rating for s in task.solution.steps.order_by("index")]
        for index, rating in enumerate(gold):
            labeling.rate(annotation=task, index=index, rating=rating)
        labeling.submit(annotation=task)
    assert quality.screening_status(annotator=ann) == quality.Screening.PASSED
    assert queueing.claim_next(annotator=ann).solution == real


def a_screening_task_rated_wrong():
    """An annotator whose only screening task has its first step rated against the gold."""
    screening_set([[1, 1, 1]])
    SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    task = queueing.claim_next(annotator=ann)
    labeling.rate(annotation=task, index=0, rating=-1)
    return ann, task


def test_failing_screening_blocks_real_work():
    ann, task = a_screening_task_rated_wrong()
    labeling.submit(annotation=task)
    with pytest.raises(queueing.ScreeningFailed):
        queueing.claim_next(annotator=ann)
    quality.reset_screening(annotator=ann)
    assert queueing.claim_next(annotator=ann).is_initial_screening


def test_submitting_and_claiming_next_in_one_go_submits_and_opens_the_next_task():
    first, second = SolutionFactory(steps=["a", "b"]), SolutionFactory(steps=["c"])
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    task = queueing.claim_next(annotator=ann)
    for index in range(2):
        labeling.rate(annotation=task, index=index, rating=1)
    reason, following = labeling.submit_and_claim_next(annotator=ann, annotation=task)
    assert reason == "solution" and Annotation.objects.get(pk=task.pk).is_submitted
    assert QueueItem.objects.get(solution=first).status == QueueItem.Status.DONE
    assert following.solution_id == second.pk and not following.is_submitted
    assert queueing.current_task(annotator=ann) == following
    assert labeling.submit_and_claim_next(annotator=ann, annotation=following, finish_reason="give_up",
                                          note="cannot tell") == ("give_up", None)  # Nothing left.


def test_failing_screening_on_the_last_screening_task_still_submits_it():
    ann, task = a_screening_task_rated_wrong()
    assert labeling.submit_and_claim_next(annotator=ann, annotation=task) == ("found_error", None)
    assert Annotation.objects.get(pk=task.pk).is_submitted
    assert quality.screening_status(annotator=ann) == quality.Screening.FAILED


def pass_screening(annotator):
    """Label every screening task the way its gold says."""
    while (task := queueing.claim_next(annotator=annotator)).is_initial_screening:
        for step in task.solution.steps.order_by("index"):
            labeling.rate(annotation=task, index=step.index, rating=step.gold_rating)
        labeling.submit(annotation=task)
    labeling.submit(annotation=task, finish_reason="give_up", note="not now")  # The first real task.


def test_passing_screening_is_a_decision_that_a_later_screening_item_does_not_reopen():
    screening_set([[1, -1]])
    SolutionFactory.create_batch(3)
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    pass_screening(ann)
    decided = ScreeningResult.objects.get(annotator=ann)
    assert decided.passed and decided.step_accuracy == 1.0 and decided.items == 1
    (added,) = screening_set([[1]])
    assert quality.screening_status(annotator=ann) == quality.Screening.PASSED
    assert not queueing.claim_next(annotator=ann).is_initial_screening
    newcomer = user_with_role("newcomer", "annotator")  # Not decided: takes the set as it is now.
    assert queueing.claim_next(annotator=newcomer).is_initial_screening
    assert added.pk in quality.screening_solution_ids()


def test_a_failed_screening_stands_when_its_gold_changes_until_an_admin_resets_it():
    ann, task = a_screening_task_rated_wrong()
    labeling.submit(annotation=task)
    assert quality.screening_status(annotator=ann) == quality.Screening.FAILED
    task.solution.steps.filter(index=0).update(gold_rating=-1)  # Gold now agrees with the annotator.
    with pytest.raises(queueing.ScreeningFailed):
        queueing.claim_next(annotator=ann)
    quality.reset_screening(annotator=ann)
    assert not ScreeningResult.objects.filter(annotator=ann).exists()
    retake = queueing.claim_next(annotator=ann)
    assert retake.is_initial_screening
    labeling.rate(annotation=retake, index=0, rating=-1)
    labeling.submit(annotation=retake)
    assert quality.screening_status(annotator=ann) == quality.Screening.PASSED


def test_a_deleted_decision_is_made_again_from_the_screening_labels_as_gold_now_says():
    (gold,) = screening_set([[1, 1]])
    SolutionFactory()
    queueing.ensure_default_queue()
    (ann,) = annotators(1)
    pass_screening(ann)
    gold.steps.update(gold_rating=-1)  # An admin corrects the gold labels, then regrades.
    ScreeningResult.objects.filter(annotator=ann).delete()
    assert quality.screening_status(annotator=ann) == quality.Screening.FAILED
    assert ScreeningResult.objects.get(annotator=ann).step_accuracy == 0.0


def test_screening_solutions_are_not_queued_as_ordinary_work():
    screening_set([[1]])
    assert queueing.ensure_default_queue() == 0
    assert Solution.objects.count() == 1


def test_the_default_queue_holds_the_queue_size_cap_across_restarts(settings):
    configure(overlap_k=2, queue_size=5)
    SolutionFactory.create_batch(8)
    assert queueing.ensure_default_queue() == 10  # five solutions, two slots each
    # Restarting the app (seed_demo, start-up) calls it again: the cap still holds.
    assert queueing.ensure_default_queue() == 0
    open_solutions = QueueItem.objects.filter(status=QueueItem.Status.AVAILABLE).values("solution_id").distinct()
    assert open_solutions.count() == 5


def test_generation_numbers_come_from_start_generation_only():
    first = queueing.start_generation(model_version_name="v1", note="first")
    second = queueing.start_generation(model_version_name="v2")
    assert (first.number, second.number) == (0, 1)
    assert Generation.objects.current_number() == 1
    # Items of a generation nobody recorded (older databases) still push the number up.
    QueueItem.objects.create(solution=SolutionFactory(), generation=7)
    assert queueing.start_generation().number == 8


def test_enqueue_makes_k_slots_per_pick_and_retires_older_waiting_items():
    configure(overlap_k=2)
    old, new = SolutionFactory(), SolutionFactory()
    first = queueing.start_generation()
    queueing.enqueue(generation=first, picks=[(old.pk, 1.0, "random", None)])
    second = queueing.start_generation(model_version_name="v2")
    created = queueing.enqueue(generation=second, picks=[(new.pk, 2.0, "convincing", 0.8)], model_version_name="v2")
    assert created == 2
    assert set(QueueItem.objects.filter(solution=old).values_list("status", flat=True)) == {"retired"}
    slots = QueueItem.objects.filter(solution=new, generation=second.number)
    assert sorted(slots.values_list("slot", flat=True)) == [0, 1]
    assert {(i.priority, i.reason, i.score_at_selection, i.model_version_name) for i in slots} == {
        (2.0, "convincing", 0.8, "v2")
    }


def test_running_seed_demo_again_queues_nothing_more():
    from django.core.management import call_command

    call_command("seed_demo", problems=8, stdout=io.StringIO())
    projects = Project.objects.filter(slug__in=["gsm8k-demo", "math-demo"])
    waiting = {p.slug: QueueItem.objects.filter(project=p, status=QueueItem.Status.AVAILABLE).count() for p in projects}
    call_command("seed_demo", problems=8, stdout=io.StringIO())  # the next `./stepwise run`
    assert len(waiting) == 2 and all(waiting.values())
    assert waiting == {p.slug: QueueItem.objects.filter(project=p, status=QueueItem.Status.AVAILABLE).count()
                       for p in projects}
    for project in projects:
        assert list(Generation.objects.filter(project=project).values_list("number", flat=True)) == [0]


# --- imported solutions are labelable before any rescore ---------------------------------


def import_lines(tmp_path, lines, name="imported.jsonl", project=None):
    import json

    from annotate.pool import importing

    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return importing.import_pool(path=path, project=project)


def answered(problem: str, answer: str, truth: str = "4") -> dict:
    return {"problem": problem, "ground_truth_answer": truth, "steps": [f"Work for {problem}", f"# Answer\n\n{answer}"]}


def test_imported_solutions_are_queued_wrong_answers_first_behind_the_work_already_waiting(tmp_path):
    waiting = SolutionFactory()
    queueing.ensure_default_queue()
    summary = import_lines(tmp_path, [answered("p1", "4"), answered("p2", "5"), answered("p3", "4"),
                                      answered("p4", "9"), answered("p5", "?! no number")])
    assert queueing.enqueue_imported(solution_ids=summary.solution_ids, seed=0) == 5
    served = [(item.solution_id, item.reason)
              for item in QueueItem.objects.filter(status="available").order_by("-priority", "id")]
    assert served[0] == (waiting.pk, queueing.DEFAULT_REASON)
    wrong = set(Solution.objects.filter(is_correct=False).values_list("pk", flat=True))
    assert {solution for solution, _ in served[1:3]} == wrong
    assert {reason for _, reason in served[1:3]} == {queueing.IMPORTED_WRONG_REASON}
    assert {reason for _, reason in served[3:]} == {queueing.IMPORTED_REASON}
    # The first annotator gets the old work, the next one an imported wrong answer.
    first, second = annotators(2)
    assert queueing.claim_next(annotator=first).solution_id == waiting.pk
    assert queueing.claim_next(annotator=second).solution_id in wrong


def test_an_import_after_the_demo_pool_is_served_before_any_demo_item(tmp_path):
    from django.core.management import call_command

    from annotate.models.pool import DEMO_SOURCE

    call_command("seed_demo", problems=6, stdout=io.StringIO())
    project = Project.objects.get(slug="gsm8k-demo")
    summary = import_lines(tmp_path, [answered("my own p1", "4"), answered("my own p2", "5")], project=project)
    assert queueing.enqueue_imported(project=project, solution_ids=summary.solution_ids) == 2
    call_command("seed_demo", problems=6, stdout=io.StringIO())  # the next `./stepwise run`
    first, second, third = (user_with_role(f"worker{i}", "annotator", project) for i in range(3))
    claimed = [queueing.claim_next(annotator=who, project=project).solution for who in (first, second, third)]
    assert {solution.pk for solution in claimed[:2]} == set(summary.solution_ids)
    assert claimed[2].source == DEMO_SOURCE


def test_queueing_an_import_again_adds_nothing_and_the_queue_cap_holds(tmp_path, settings):
    configure(queue_size=3)
    configure(overlap_k=2)
    SolutionFactory()
    queueing.ensure_default_queue()
    summary = import_lines(tmp_path, [answered(f"p{n}", "4") for n in range(5)])
    assert queueing.enqueue_imported(solution_ids=summary.solution_ids) == 2
    assert queueing.enqueue_imported(solution_ids=summary.solution_ids) == 0
    open_items = QueueItem.objects.filter(status="available")
    assert open_items.values("solution_id").distinct().count() == 3 and open_items.count() == 6


def test_a_model_generation_keeps_its_limit_per_problem_for_imported_samples(tmp_path, settings):
    configure(queue_per_problem=2)
    queueing.start_generation(model_version_name="v1")
    summary = import_lines(tmp_path, [answered("one problem", str(n)) for n in range(8)])
    assert queueing.enqueue_imported(solution_ids=summary.solution_ids) == 2
    assert set(QueueItem.objects.values_list("model_version_name", flat=True)) == {"v1"}


def test_reference_gold_and_labeled_solutions_are_not_queued_from_an_import(tmp_path):
    import json

    from annotate.pool import importing

    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "What is 3 + 1?", "answer": "3 + 1 = 4\n#### 4"}) + "\n")
    summary = importing.import_pool(path=path)
    assert summary.created == 1 and queueing.enqueue_imported(solution_ids=summary.solution_ids) == 0
    gold = SolutionFactory(is_gold=True)
    assert queueing.enqueue_imported(solution_ids=[gold.pk]) == 0
    assert not QueueItem.objects.exists()


def test_an_import_job_queues_its_solutions_and_records_the_graded_counts(tmp_path):
    import json

    from annotate.models import ImportJob
    from annotate.pool import importing
    from annotate.tasks import import_pool_task

    path = tmp_path / "upload.jsonl"
    lines = [answered("p1", "4"), answered("p2", "5"), answered("p3", "?! no number"), answered("p1", "4")]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = importing.create_import_job(path=path, original_name="upload.jsonl")
    import_pool_task(job.pk)
    job = ImportJob.objects.get(pk=job.pk)
    assert (job.state, job.created, job.duplicates) == ("succeeded", 3, 1)
    assert (job.graded_right, job.graded_wrong, job.graded_unknown, job.queued) == (1, 1, 1, 3)
    assert QueueItem.objects.filter(status="available").values("solution_id").distinct().count() == 3
    assert Solution.objects.get(problem__statement="p1").sample_count == 2


def test_a_claim_writes_a_label_and_a_first_completion_per_step_and_answers_with_the_steps():
    (annotator,) = annotators(1)
    SolutionFactory(steps=["Let $x = 2$.", "So $2x = 4$.", "# Answer\n\n4"])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)

    texts = ["Let $x = 2$.", "So $2x = 4$.", "# Answer\n\n4"]
    assert [(step.step_index, step.text) for step in task.started_steps] == list(enumerate(texts))
    labels = StepLabel.objects.filter(annotation=task).order_by("index")
    assert [(label.index, label.chosen_completion, label.human_completion, label.time_ms, label.assistance)
            for label in labels] == [(i, None, None, None, None) for i in range(3)]
    assert [list(label.completions.values_list("index", "text", "rating", "flagged", "extra")) for label in labels] \
        == [[(0, text, None, None, {})] for text in texts]
    stored = Annotation.objects.get(pk=task.pk)  # what save() would have written
    assert (stored.status, stored.question_extra, stored.queue_item_id) == ("in_progress", {}, task.queue_item_id)
    assert stored.created_at is not None and stored.updated_at is not None


def test_a_task_started_on_a_solution_without_steps_is_written_and_has_none():
    (annotator,) = annotators(1)
    solution = SolutionFactory(steps=[])
    annotation = Annotation(solution=solution, annotator=annotator, labeler=annotator.username, generation=0)
    assert starting.start(annotation) == []
    assert Annotation.objects.get(pk=annotation.pk).solution_id == solution.pk
    assert not StepLabel.objects.filter(annotation=annotation).exists()


def _planner_rows(model) -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [model._meta.db_table])
        return cursor.fetchone()[0]


@pytest.mark.postgresql
def test_a_large_import_leaves_the_planner_counting_the_new_solutions(tmp_path, monkeypatch):
    monkeypatch.setattr(queueing, "STATISTICS_AFTER", 3)
    small = import_lines(tmp_path, [answered("s1", "4"), answered("s2", "5")])
    before = _planner_rows(Solution)
    queueing.enqueue_imported(solution_ids=small.solution_ids)
    assert _planner_rows(Solution) == before  # too few to analyze for
    large = import_lines(tmp_path, [answered(f"l{i}", "4") for i in range(3)])
    queueing.enqueue_imported(solution_ids=large.solution_ids)
    assert _planner_rows(Solution) == Solution.objects.count() == 5
    assert _planner_rows(QueueItem) == QueueItem.objects.count()
