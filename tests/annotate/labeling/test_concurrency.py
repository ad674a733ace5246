"""Many annotators claiming at the same instant on PostgreSQL: never one solution twice. One
task's actions racing each other (a double click, a second tab): never a change made against a
task that changed since it was read."""
import threading
import time
from collections import Counter

import pytest
from django.db import transaction

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, rows
from annotate.labeling.refusals import AlreadySubmitted, Conflict, LabelingError
from annotate.models import Annotation, Completion, LabelingConfig, Project, QueueItem
from tests.factories import SolutionFactory, user_with_role
from tests.threads import run_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]
CLIENTS = 20


def run_clients(users, work):
    """Run work(user) in one thread per user, all released at once; re-raise any error."""
    barrier = threading.Barrier(len(users))

    def client(user):
        barrier.wait()
        work(user)

    run_threads([lambda user=user: client(user) for user in users])


def test_twenty_clients_claiming_at_once_get_twenty_different_solutions():
    SolutionFactory.create_batch(30, steps=["a", "b"])
    queueing.ensure_default_queue()
    users = [user_with_role(f"c{i}", "annotator") for i in range(CLIENTS)]
    run_clients(users, lambda user: queueing.claim_next(annotator=user))
    leased = QueueItem.objects.filter(status=QueueItem.Status.LEASED)
    assert leased.count() == CLIENTS
    assert len(set(leased.values_list("solution_id", flat=True))) == CLIENTS
    assert len(set(leased.values_list("leased_to_id", flat=True))) == CLIENTS
    assert Annotation.objects.count() == CLIENTS


def test_clients_racing_over_a_small_pool_never_share_a_solution():
    SolutionFactory.create_batch(25, steps=["a"])
    queueing.ensure_default_queue()
    users = [user_with_role(f"r{i}", "annotator") for i in range(CLIENTS)]

    def label_until_empty(user):
        while (task := queueing.claim_next(annotator=user)) is not None:
            labeling.rate(annotation=task, index=0, rating=1)
            labeling.submit(annotation=task)

    run_clients(users, label_until_empty)
    per_solution = Counter(Annotation.objects.values_list("solution_id", flat=True))
    assert len(per_solution) == 25 and set(per_solution.values()) == {1}
    assert QueueItem.objects.filter(status=QueueItem.Status.DONE).count() == 25


def test_with_overlap_each_solution_gets_exactly_k_different_annotators():
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"overlap_k": 3})
    SolutionFactory.create_batch(5, steps=["a"])
    queueing.ensure_default_queue()
    users = [user_with_role(f"o{i}", "annotator") for i in range(CLIENTS)]
    run_clients(users, lambda user: queueing.claim_next(annotator=user))
    pairs = list(Annotation.objects.values_list("solution_id", "annotator_id"))
    assert len(pairs) == 15 and len(set(pairs)) == 15
    assert set(Counter(s for s, _ in pairs).values()) == {3}


def test_one_annotator_double_clicking_start_opens_one_task():
    SolutionFactory.create_batch(5, steps=["a"])
    queueing.ensure_default_queue()
    user = user_with_role("clicker", "annotator")
    run_clients([user] * 8, lambda u: queueing.claim_next(annotator=u))
    assert Annotation.objects.filter(annotator=user).count() == 1
    assert QueueItem.objects.filter(status=QueueItem.Status.LEASED).count() == 1


def test_a_claim_from_another_tab_during_a_submit_and_claim_neither_deadlocks_nor_opens_two_tasks():
    """The submit takes the annotator's claim lock before it locks its task: a claim holding that
    lock (another tab) renews the open task's item while the submit waits, instead of waiting
    for an item the submit has already finished while the submit waits for the lock."""
    SolutionFactory.create_batch(3, steps=["a"])
    queueing.ensure_default_queue()
    user = user_with_role("two-tabs", "annotator")
    task = queueing.claim_next(annotator=user)
    labeling.rate(annotation=task, index=0, rating=1)
    tab_holds_lock, submit_started = threading.Event(), threading.Event()
    seen = {}

    def other_tab():
        with transaction.atomic():
            queueing.lock_claims(annotator=user)
            tab_holds_lock.set()
            submit_started.wait(timeout=10)
            time.sleep(0.5)  # The submit is now waiting, or (before the fix) holding the task.
            seen["tab"] = queueing.claim_locked(annotator=user)

    def submit():
        tab_holds_lock.wait(timeout=10)
        submit_started.set()
        seen["submit"] = labeling.submit_and_claim_next(annotator=user, annotation=task)

    run_threads([other_tab, submit])
    assert seen["tab"] == task  # The tab resumed the open task, then the submit went on.
    reason, following = seen["submit"]
    assert reason == "solution" and following is not None and following != task
    assert list(Annotation.objects.in_progress().filter(annotator=user)) == [following]


def a_task(steps=("a", "b", "c")) -> Annotation:
    SolutionFactory(steps=list(steps))
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=user_with_role("tabs", "annotator"))


def between_read_and_write(monkeypatch, change, *, times: int = 1) -> None:
    """Make `change` (another request, committed) land between the next actions' reads of their
    task and their writes, `times` times."""
    opened, left, inside = rows._opened, [times], []

    def opened_then_changed(*args):
        read = opened(*args)
        if left[0] and not inside:
            left[0] -= 1
            inside.append(True)
            try:
                change()
            finally:
                inside.pop()
        return read

    monkeypatch.setattr(rows, "_opened", opened_then_changed)


def stored(task, field="rating") -> list:
    return list(Completion.objects.filter(step_label__annotation=task).order_by("step_label__index")
                .values_list(field, flat=True))


def test_an_undo_read_before_another_tab_rated_the_next_step_is_judged_again_and_refused(monkeypatch):
    task = a_task()
    labeling.rate(annotation=task, index=0, rating=1)
    between_read_and_write(monkeypatch, lambda: labeling.rate(annotation=task, index=1, rating=1))
    with pytest.raises(LabelingError, match="only the last rated step"):
        labeling.undo(annotation=task, index=0)
    assert stored(task) == [1, 1, None]  # not [None, 1, None]: a rated step after an unrated one


def test_a_rating_read_before_another_tabs_rating_is_made_again_and_answers_with_both(monkeypatch):
    task = a_task()
    labeling.rate(annotation=task, index=0, rating=1)
    between_read_and_write(monkeypatch, lambda: labeling.rate(annotation=task, index=1, rating=1))
    answer = labeling.rate(annotation=task, index=0, rating=0)
    assert [step.rating for step in answer.steps] == [0, 1, None] == stored(task)


def test_a_rating_read_before_the_task_was_submitted_is_refused_and_leaves_the_labels_as_submitted(monkeypatch):
    task = a_task(steps=("a",))
    labeling.rate(annotation=task, index=0, rating=1)
    between_read_and_write(monkeypatch, lambda: labeling.submit(annotation=task))
    with pytest.raises(AlreadySubmitted):
        labeling.rate(annotation=task, index=0, rating=-1)
    assert stored(task) == [1]


def test_an_action_whose_task_changes_after_every_read_gives_up_without_writing(monkeypatch):
    task = a_task()
    between_read_and_write(monkeypatch, lambda: labeling.flag(annotation=task, index=0, flagged=False), times=99)
    with pytest.raises(Conflict):
        labeling.flag(annotation=task, index=0, flagged=True)
    assert stored(task, "flagged") == [False, None, None]
