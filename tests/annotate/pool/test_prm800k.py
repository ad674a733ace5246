"""The PRM800K line format: parsing with clear errors, and exact rebuilding from the database."""
import copy
import json
from pathlib import Path

import pytest

from annotate.models import Annotation, Completion, FinishReason, Generation, Project, QueueItem, Solution, StepLabel
from annotate.pool import importing, prm800k
from annotate.pool.prm800k import LineError, line_for_annotation, parse_line
from tests.factories import SolutionFactory

pytestmark = pytest.mark.embedded

STEPS = [
    "Let the number of students be $n$.",
    "Then $3n + 4 = 19$, so $3n = 15$.",
    "So $n = 6$.",
    "# Answer\n\n6",
]

# Phase 2: pre-generated steps, labels stop at the first error (found_error).
PHASE2 = {
    "labeler": "97fb6b55-7d2a-4b0d-9b3f-0c3f8a5e7d11",
    "timestamp": "2023-02-03T11:07:41.911227",
    "generation": 4,
    "is_quality_control_question": False,
    "is_initial_screening_question": False,
    "question": {
        "problem": "Three times a number plus four is nineteen. What is the number?",
        "ground_truth_solution": "We have $3n+4=19$, so $n=\\boxed{5}$.",
        "ground_truth_answer": "5",
        "pre_generated_steps": STEPS,
        "pre_generated_answer": "6",
        "pre_generated_verifier_score": 0.20153164863586426,
    },
    "label": {
        "steps": [
            {"completions": [{"text": STEPS[0], "rating": 0, "flagged": None}], "human_completion": None,
             "chosen_completion": 0},
            {"completions": [{"text": STEPS[1], "rating": 1, "flagged": None}], "human_completion": None,
             "chosen_completion": 0},
            {"completions": [{"text": STEPS[2], "rating": -1, "flagged": False}], "human_completion": None,
             "chosen_completion": None},
        ],
        "total_time": 61022,
        "finish_reason": "found_error",
    },
}

# Phase 1: no pre-generated solution (keys null here), several completions per step, a human one.
PHASE1 = {
    "labeler": "0a6b1c8e-5e0d-4c52-9f4f-2b1f7f0c9a33",
    "timestamp": "2022-08-01T09:12:00",
    "generation": None,
    "is_quality_control_question": False,
    "is_initial_screening_question": True,
    "question": {
        "problem": "What is $\\frac{1}{2} + \\frac{1}{3}$?",
        "ground_truth_answer": "\\frac{5}{6}",
        "ground_truth_solution": "The common denominator is 6: $\\frac36+\\frac26=\\boxed{\\frac56}$.",
        "pre_generated_steps": None,
        "pre_generated_answer": None,
        "pre_generated_verifier_score": None,
    },
    "label": {
        "steps": [
            {"completions": [
                {"text": "The common denominator is $6$.", "rating": 1, "flagged": False},
                {"text": "The common denominator is $5$.", "rating": -1, "flagged": False},
                {"text": "I add the numerators and denominators.", "rating": -1, "flagged": True},
            ], "human_completion": None, "chosen_completion": 0},
            {"completions": [
                {"text": "So the sum is $\\frac{2}{6}$.", "rating": -1, "flagged": None},
            ], "human_completion": {"text": "So the sum is $\\frac36 + \\frac26 = \\frac56$.\n\n# Answer\n\n\\frac56",
                                    "rating": None, "source": "human", "flagged": False, "corrected_rating": None},
               "chosen_completion": None},
        ],
        "total_time": 120733,
        "finish_reason": "solution",
    },
}


def write_lines(tmp_path: Path, lines: list, name: str = "labels.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def rebuilt() -> list[dict]:
    annotations = Annotation.objects.order_by("id").select_related("solution__problem", "queue_item").prefetch_related(
        "solution__steps", "step_labels__completions"
    )
    return [line_for_annotation(a) for a in annotations]


@pytest.mark.django_db
def test_phase1_and_phase2_lines_are_imported_with_labels_and_rebuilt_exactly(tmp_path):
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write_lines(tmp_path, [PHASE1, PHASE2]), format="prm800k")
    assert (summary.created, summary.errors) == (2, 0), summary.first_errors
    assert rebuilt() == [PHASE1, PHASE2]


@pytest.mark.django_db
def test_phase2_line_maps_onto_the_pool_and_its_labels(tmp_path):
    importing.import_pool(project=Project.objects.sole(), path=write_lines(tmp_path, [PHASE2]), format="auto")
    annotation = Annotation.objects.get()
    solution = annotation.solution
    assert [s.text for s in solution.steps.all()] == STEPS
    assert (solution.final_answer, solution.is_correct) == ("6", False)
    assert solution.pre_generated_verifier_score == pytest.approx(0.20153164863586426)
    assert solution.problem.ground_truth_answer == "5"
    assert annotation.annotator is None
    assert annotation.status == Annotation.Status.SUBMITTED
    assert annotation.finish_reason == FinishReason.FOUND_ERROR
    assert (annotation.labeler, annotation.generation, annotation.total_time_ms) == (PHASE2["labeler"], 4, 61022)
    assert annotation.timestamp.isoformat() == "2023-02-03T11:07:41.911227+00:00"
    ratings = list(Completion.objects.order_by("step_label__index").values_list("rating", flat=True))
    assert ratings == [0, 1, -1]
    assert StepLabel.objects.get(index=2).chosen_completion is None


@pytest.mark.django_db
def test_phase1_solution_follows_chosen_then_human_completions(tmp_path):
    importing.import_pool(project=Project.objects.sole(), path=write_lines(tmp_path, [PHASE1]), format="prm800k")
    solution = Solution.objects.get()
    assert [s.text for s in solution.steps.all()] == [
        "The common denominator is $6$.",
        PHASE1["label"]["steps"][1]["human_completion"]["text"],
    ]
    assert (solution.final_answer, solution.is_correct) == ("\\frac56", True)
    step = StepLabel.objects.get(index=1)
    assert step.human_completion == PHASE1["label"]["steps"][1]["human_completion"]
    assert Completion.objects.filter(step_label__index=0).count() == 3


@pytest.mark.django_db
def test_absent_keys_unknown_keys_and_odd_timestamps_survive_the_round_trip(tmp_path):
    line = copy.deepcopy(PHASE1)
    line["timestamp"] = "2022-08-01T09:12:00Z"
    for key in ("pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score", "ground_truth_solution"):
        del line["question"][key]
    line["question"]["subject"] = "Prealgebra"
    line["label"]["steps"][0]["completions"][1]["source"] = "sample"
    del line["label"]["steps"][0]["completions"][2]["flagged"]
    line["label"]["steps"][1]["note"] = "checked twice"
    line["label"]["reviewed"] = True
    line["batch"] = 17
    importing.import_pool(project=Project.objects.sole(), path=write_lines(tmp_path, [line]), format="prm800k")
    assert rebuilt() == [line]
    assert json.dumps(rebuilt()[0]) == json.dumps(line)  # same key order too


@pytest.mark.django_db
def test_lines_sharing_a_problem_keep_their_own_question_fields(tmp_path):
    other = copy.deepcopy(PHASE2)
    other["labeler"] = "second-labeler"
    other["question"]["ground_truth_solution"] = "A different write-up: $n=\\boxed{5}$."
    other["question"]["pre_generated_verifier_score"] = 0.5
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write_lines(tmp_path, [PHASE2, other]), format="prm800k")
    assert summary.created == 2
    # One problem and one solution, two labelers' annotations of it.
    assert Solution.objects.count() == 1
    assert rebuilt() == [PHASE2, other]


@pytest.mark.django_db
def test_reimporting_labels_creates_nothing_and_reports_duplicates(tmp_path):
    path = write_lines(tmp_path, [PHASE1, PHASE2, PHASE2])
    first = importing.import_pool(project=Project.objects.sole(), path=path, format="prm800k")
    assert (first.created, first.duplicates) == (2, 1)
    second = importing.import_pool(project=Project.objects.sole(), path=path, format="prm800k")
    assert (second.created, second.duplicates, second.errors) == (0, 3, 0)
    assert Annotation.objects.count() == 2
    assert StepLabel.objects.count() == 5


@pytest.mark.django_db
def test_a_workspace_annotation_is_written_as_a_prm800k_line(annotator):
    solution = SolutionFactory(steps=["Two plus two is four.", "# Answer\n\n4"], final_answer="4",
                               pre_generated_verifier_score=0.9)
    Generation.objects.create(number=3)
    item = QueueItem.objects.create(solution=solution, generation=3, score_at_selection=0.25)
    annotation = Annotation.objects.create(
        solution=solution, annotator=annotator, labeler=annotator.username, status=Annotation.Status.SUBMITTED,
        finish_reason=FinishReason.SOLUTION, total_time_ms=5000, generation=3, queue_item=item,
    )
    for index, text in enumerate(["Two plus two is four.", "# Answer\n\n4"]):
        step = StepLabel.objects.create(annotation=annotation, index=index, chosen_completion=0)
        Completion.objects.create(step_label=step, index=0, text=text, rating=1, flagged=False)
    [line] = rebuilt()
    assert line["labeler"] == annotator.username
    assert line["timestamp"] is None
    assert line["question"] == {
        "problem": solution.problem.statement,
        "ground_truth_solution": None,
        "ground_truth_answer": solution.problem.ground_truth_answer,
        "pre_generated_steps": ["Two plus two is four.", "# Answer\n\n4"],
        "pre_generated_answer": "4",
        "pre_generated_verifier_score": 0.25,  # the score it was selected with, not the imported one
    }
    assert line["label"] == {
        "steps": [
            {"completions": [{"text": "Two plus two is four.", "rating": 1, "flagged": False}],
             "human_completion": None, "chosen_completion": 0},
            {"completions": [{"text": "# Answer\n\n4", "rating": 1, "flagged": False}],
             "human_completion": None, "chosen_completion": 0},
        ],
        "total_time": 5000,
        "finish_reason": "solution",
    }


def _broken(path: str, value):
    line = copy.deepcopy(PHASE2)
    *parents, last = path.split(".")
    target = line
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return line


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("labeler", KeyError, "field 'labeler': is missing"),
        ("labeler", 12, "field 'labeler': must be a string, got int"),
        ("generation", "4", "field 'generation': must be an integer or null, got a string"),
        ("timestamp", "yesterday", "field 'timestamp': is not an ISO 8601 date-time"),
        ("is_quality_control_question", None, "field 'is_quality_control_question': must be true or false"),
        ("question", [], "field 'question': must be an object, got a list"),
        ("question.problem", KeyError, "field 'question.problem': is missing"),
        ("question.pre_generated_steps", "one step", "field 'question.pre_generated_steps': must be a list"),
        ("question.pre_generated_verifier_score", "high", "field 'question.pre_generated_verifier_score'"),
        ("label.finish_reason", "done", "field 'label.finish_reason': must be one of"),
        ("label.steps", {}, "field 'label.steps': must be a list, got an object"),
        ("label.steps.1.completions.0.rating", 2, "field 'label.steps[1].completions[0].rating': must be -1, 0, 1"),
        ("label.steps.1.completions.0.text", KeyError, "field 'label.steps[1].completions[0].text': is missing"),
        ("label.steps.0.chosen_completion", 3, "field 'label.steps[0].chosen_completion': is 3 but the step has 1"),
        ("label.steps.2.human_completion", 7, "field 'label.steps[2].human_completion'"),
        ("label.total_time", -5, "field 'label.total_time': must be at least 0"),
        ("generation", 2**40, "field 'generation': must be at most 2147483647"),
    ],
)
def test_bad_fields_are_named_in_the_error(field, value, message):
    with pytest.raises(LineError) as error:
        parse_line(_broken(field, value), 7)
    assert message in str(error.value)


def test_timestamps_are_stored_timezone_aware_and_spelled_back_the_same():
    line = parse_line(PHASE2, 1)
    assert line.timestamp.tzinfo is not None
    assert prm800k.format_timestamp(line.timestamp) == PHASE2["timestamp"]
