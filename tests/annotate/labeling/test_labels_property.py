"""Property: any labeling run, through every export and back, says what the verdict function says.

Hypothesis draws a labeling run and drives it through the labeling functions (ratings, corrections
in place, flags, rewrites, undo; finished by the ratings, give_up or bad_problem; reported by the
page or by an API client without times), under either project setting (stop at the first error
or rate every step; written corrections on or off). Then every export format reads it, and the
PRM800K line is imported again:

- the PRM800K line passes the schema, has a whole `total_time`, and a rewritten step is never
  chosen; imported again, it gives the same verdicts and is written back the same;
- TRL rows are the verdicts' paths and rejected texts, labeled by their verdicts;
- ProcessBench's label is the verdicts' first error (-1 for none), or there is no row when the
  annotation does not decide it or the answer's grade contradicts it; soft labels count `pool_path`.
"""
import json

import pytest
from django.db import transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, verdicts
from annotate.labeling.actions import ActiveTime, LabelingError
from annotate.models import Annotation, Completion, LabelingConfig, Project
from annotate.pool import exporting, importing, prm800k
from annotate.pool.exporting import ExportOptions
from infra.memo import forget_all
from tests.annotations import without_assistance
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

RATING = st.sampled_from([-1, 0, 1])
REWRITE = st.sampled_from(["It is 4.", "So x = 3.\n\n# Answer\n\n3"])
# Rate the next step and, after a -1, maybe write it as it should be (drawn twice as often as the
# rest); correct the last rated step in place; flag it; undo it.
RATE = st.tuples(st.just("rate"), st.tuples(RATING, st.none() | REWRITE))
ACTIONS = st.lists(st.one_of(
    RATE, RATE,
    st.tuples(st.just("correct"), RATING),
    st.tuples(st.just("flag"), st.booleans()),
    st.tuples(st.just("undo"), st.none()),
), max_size=10)


class Run:
    """One task labeled through the labeling functions, times reported or not."""

    def __init__(self, task: Annotation, page: bool):
        self.task, self.page, self.clock = task, page, 0

    def times(self) -> ActiveTime | None:
        self.clock += 400
        return ActiveTime(total_ms=self.clock) if self.page else None

    def ratings(self) -> list[int | None]:
        completions = Completion.objects.filter(step_label__annotation_id=self.task.pk, index=0)
        return list(completions.order_by("step_label__index").values_list("rating", flat=True))

    def act(self, action: str, value) -> None:
        ratings = self.ratings()
        last = max((i for i, r in enumerate(ratings) if r is not None), default=0)
        unrated = next((i for i, r in enumerate(ratings) if r is None), last)
        try:
            if action == "rate":
                rating, rewrite = value
                labeling.rate(annotation=self.task, index=unrated, rating=rating, times=self.times())
                if rewrite is not None:
                    labeling.write_completion(annotation=self.task, index=unrated, text=rewrite, times=self.times())
            elif action == "correct":
                labeling.rate(annotation=self.task, index=last, rating=value, times=self.times())
            elif action == "flag":
                labeling.flag(annotation=self.task, index=last, flagged=value, times=self.times())
            else:
                labeling.undo(annotation=self.task, index=last, times=self.times())
        except LabelingError:
            pass  # Not allowed in this state (a step past the first error, a rewrite refused, ...): nothing changed.

    def finish(self, how: str) -> None:
        if how in ("give_up", "bad_problem"):
            labeling.submit(annotation=self.task, finish_reason=how, note="drawn", times=self.times())
            return
        for index, rating in enumerate(self.ratings()):  # rate the rest +1, as far as the project lets
            if rating is None:
                try:
                    labeling.rate(annotation=self.task, index=index, rating=1, times=self.times())
                except LabelingError:
                    break  # past the first error, with stop at the first error
        labeling.submit(annotation=self.task, times=self.times())


def rows(format: str) -> list[dict]:
    return list(exporting.iter_rows(format=format, options=ExportOptions()))


def expected_trl(verdict: verdicts.Verdicts, prompt: str) -> list[dict]:
    """The TRL rows the verdicts give: along the walked path, a row for each rated text shown and
    not gone on from (alternatives, the step stopped at), then the path itself."""
    out, texts, labels = [], [], []
    for step in verdict.path:
        stopped = step.source == "stopped"
        for shown in sorted([*((step,) if stopped else ()), *step.alternatives], key=lambda c: c.completion_index or 0):
            if shown.rating is not None:
                out.append({"prompt": prompt, "completions": [*texts, shown.text],
                            "labels": [*labels, shown.rating in (0, 1)]})
        if not stopped:
            texts, labels = [*texts, step.text], [*labels, step.rating in (0, 1)]
    return [*out, {"prompt": prompt, "completions": texts, "labels": labels}] if texts else out


def check_exports(annotation: Annotation, tmp_path) -> None:
    verdict = verdicts.verdicts(annotation)
    reason = annotation.finish_reason
    (line,) = rows("prm800k")
    prm800k.parse_line(json.loads(json.dumps(line)), 1)
    assert type(line["label"]["total_time"]) is int and line["label"]["finish_reason"] == reason
    for step in line["label"]["steps"]:
        if step["human_completion"] is not None:  # a rewrite: its -1 completion kept, not gone on from
            assert step["chosen_completion"] is None and step["completions"][0]["rating"] == -1
    withheld = verdict.withheld(reason)
    prompt = annotation.solution.problem.statement
    assert without_assistance(rows("trl")) == ([] if withheld else expected_trl(verdict, prompt))
    contradicted = verdict.contradicts_grade(reason, annotation.solution.is_correct)
    decides = verdict.decides_first_error(reason) and not contradicted
    labels = [row["label"] for row in rows("processbench")]
    assert labels == ([-1 if verdict.first_error is None else verdict.first_error] if decides else [])
    soft = rows("soft")
    if withheld is None and any(r is not None for r in verdict.pool_path):
        assert soft[0]["n"] == [int(r is not None) for r in verdict.pool_path]
        assert soft[0]["k"] == [int(r in (0, 1)) for r in verdict.pool_path]
    # The PRM800K line imported again gives the same verdicts, and the same line.
    Annotation.objects.filter(pk=annotation.pk).delete()
    path = tmp_path / "again.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert importing.import_pool(path=path, format="prm800k").errors == 0
    again = Annotation.objects.get()
    assert again.finish_reason == reason
    assert (verdicts.verdicts(again).ratings, verdicts.verdicts(again).pool_ratings) == (
        verdict.ratings, verdict.pool_ratings)
    assert rows("prm800k") == [line]


PHASE1 = {"stop": False, "rewrites": True, "steps": 4, "page": False, "correct": False}
REWRITE_AND_GO_ON = [("rate", (1, None)), ("rate", (-1, "It is 4.")), ("rate", (1, None))]


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# The rewrite case, always tried: rewrite a step, go on, finish every way.
@example(**PHASE1, actions=REWRITE_AND_GO_ON, finish="ratings")
@example(**PHASE1, actions=[*REWRITE_AND_GO_ON, ("rate", (-1, None))], finish="ratings")
@example(**PHASE1, actions=REWRITE_AND_GO_ON, finish="give_up")
@example(**PHASE1, actions=[*REWRITE_AND_GO_ON, ("undo", None), ("flag", True)], finish="bad_problem")
@example(**PHASE1, actions=[], finish="ratings")  # solution, every step good of an answer graded wrong
@given(stop=st.booleans(), rewrites=st.booleans(), steps=st.integers(1, 4), actions=ACTIONS,
       finish=st.sampled_from(["ratings", "give_up", "bad_problem"]), page=st.booleans(), correct=st.booleans())
def test_any_labeling_run_exports_and_imports_as_its_verdicts_say(
    annotator, tmp_path, stop, rewrites, steps, actions, finish, page, correct
):
    with transaction.atomic():  # each example starts from an empty pool
        forget_all()
        config = LabelingConfig.of(Project.objects.sole())
        config.stop_at_first_error, config.allow_human_completion = stop, rewrites
        config.save()
        SolutionFactory(steps=[f"Step {i + 1}." for i in range(steps)], is_correct=correct)
        queueing.ensure_default_queue()
        run = Run(queueing.claim_next(annotator=annotator), page)
        for action, value in actions:
            run.act(action, value)
        run.finish(finish)
        check_exports(Annotation.objects.get(pk=run.task.pk), tmp_path)
        transaction.set_rollback(True)
