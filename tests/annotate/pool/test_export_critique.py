"""The critique export: verification chains as chat messages for a generative verifier, from a
judge's critiques and from what annotators wrote (their rewrites and flags)."""
import pytest

from annotate.models import AutoLabelRun, AutoStepLabel, Project
from annotate.pool import exporting
from annotate.pool.exporting import ExportOptions
from steps import verification
from tests.annotate.pool.test_export_rewrites import REWRITE, STEPS, label, phase1_config  # noqa: F401
from tests.annotations import annotate
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db


def rows(**options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format="critique",
                                    options=ExportOptions(**options)))


def test_a_judge_row_is_the_whole_solution_then_each_critique_and_verdict_up_to_the_first_incorrect():
    solution = SolutionFactory(steps=["x = 2.", "2x = 5.", "So 5."])
    run = AutoLabelRun.objects.create(method="judge", source="verifier-7b")
    for index, soft, critique in ((0, 0.9, "Sets x."), (1, 0.1, "2 times 2 is 4, not 5."), (2, 0.2, "Follows.")):
        AutoStepLabel.objects.create(run=run, step=solution.steps.get(index=index), soft=soft, critique=critique)
    (row,) = rows(labels="judge")
    problem = solution.problem.statement
    assert row == {"messages": [
        {"role": "user", "content": verification.DEFAULT_TEMPLATE.replace("{problem}", problem).replace(
            "{steps}", "Step 1: x = 2.\n\nStep 2: 2x = 5.\n\nStep 3: So 5.")},
        {"role": "assistant", "content": "Sets x.\nStep 1: correct\n\n2 times 2 is 4, not 5.\nStep 2: incorrect"},
    ], "solution_id": solution.id, "source": "judge"}


def test_a_human_row_holds_the_annotators_rewrite_as_the_critique_of_the_step(annotator, phase1_config):  # noqa: F811
    task = label(annotator, [1, -1, 1, 1], {1: REWRITE})
    (row,) = rows()
    assert (row["solution_id"], row["source"]) == (task.solution_id, "human")
    assert row["messages"][0]["content"] == verification.render_prompt(
        verification.DEFAULT_TEMPLATE, problem=task.solution.problem.statement, steps=STEPS)
    assert row["messages"][1]["content"] == f"Step 1: correct\n\nThe step should read: {REWRITE}\nStep 2: incorrect"


def test_a_step_only_rated_has_its_verdict_alone_and_the_neutral_rule_applies():
    annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 0, 1], labeler="x")
    assert rows()[0]["messages"][1]["content"] == "Step 1: correct\n\nStep 2: correct\n\nStep 3: correct"
    assert rows(neutral_is_good=False)[0]["messages"][1]["content"] == "Step 1: correct\n\nStep 2: incorrect"
