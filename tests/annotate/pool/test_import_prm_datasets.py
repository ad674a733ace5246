"""Public PRM datasets in: Math-Shepherd's tagged steps and ProcessBench's first errors become
automatic labels with provenance, never human labels; bad lines are named, atomic imports hold."""
import json
from pathlib import Path

import pytest

from annotate.models import Annotation, AutoLabelRun, AutoStepLabel, Project, Solution, StepLabel
from annotate.pool import exporting, importing
from annotate.pool.exporting import ExportOptions

pytestmark = [pytest.mark.embedded, pytest.mark.django_db]

# Lines as peiyi9979/Math-Shepherd writes them: the problem, then "Step k:" steps each closed by
# "ки"; `label` is the same text with "+" (some rollout from here reached the answer) or "-".
DUCKS = ("Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her "
         "friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck "
         "egg. How much in dollars does she make every day at the farmers' market?")
DUCK_STEPS = [
    "Step 1: Janet's ducks lay 16 eggs per day, and she eats 3 for breakfast, so she has 16 - 3 = <<16-3=13>>13 "
    "eggs left.",
    "Step 2: She bakes muffins with 4 eggs, so she has 13 - 4 = <<13-4=9>>9 eggs left.",
    "Step 3: She sells the remaining 9 eggs for $2 each, so she makes 9 * $2 = $<<9*2=18>>18. The answer is: 18",
]
ROBE_STEPS = [
    "Step 1: A robe takes 2 bolts of blue fiber.",
    "Step 2: It takes half that much white fiber, so 2 * 2 = <<2*2=4>>4 bolts of white fiber.",
    "Step 3: In total it takes 2 + 4 = <<2+4=6>>6 bolts. The answer is: 6",
]
ROBE = "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?"


def shepherd(problem: str, steps: list[str], signs: str, task: str = "GSM8K") -> dict:
    tagged = "\n".join(f"{step} ки" for step in steps)
    labeled = "\n".join(f"{step} {sign}" for step, sign in zip(steps, signs, strict=True))
    return {"input": f"{problem} {tagged}", "label": f"{problem} {labeled}", "task": task}


# Lines as Qwen/ProcessBench writes them: `label` is the first wrong step's index, -1 for none.
PROCESSBENCH = [
    {"id": "gsm8k-0", "generator": "Qwen2-7B-Instruct", "problem": "What is 3 * (2 + 5)?",
     "steps": ["First, 2 + 5 = 7.", "Then 3 * 7 = 24.", "So the answer is \\boxed{24}."],
     "final_answer_correct": False, "label": 1},
    {"id": "gsm8k-1", "generator": "Llama-3.1-8B-Instruct", "problem": "What is 10 - 4?",
     "steps": ["10 - 4 = 6.", "The answer is \\boxed{6}."], "final_answer_correct": True, "label": -1},
]


def write(tmp_path: Path, lines: list, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n"
                            for line in lines), encoding="utf-8")
    return path


def auto_labels(solution: Solution) -> list[float | None]:
    by_index = {label.step.index: label.soft for label in AutoStepLabel.objects.filter(step__solution=solution)}
    return [by_index.get(i) for i in range(solution.steps.count())]


def test_math_shepherd_lines_become_steps_with_their_automatic_labels(tmp_path):
    path = write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "+++"), shepherd(ROBE, ROBE_STEPS, "+--")])
    summary = importing.import_pool(project=Project.objects.sole(), path=path)  # The format is detected.
    assert (summary.format, summary.created, summary.errors) == ("math_shepherd", 2, 0)
    ducks, robe = Solution.objects.order_by("id")
    assert ducks.problem.statement == DUCKS
    assert [step.text for step in ducks.steps.order_by("index")] == DUCK_STEPS
    assert auto_labels(ducks) == [1.0, 1.0, 1.0] and auto_labels(robe) == [1.0, 0.0, 0.0]
    # The last step's label grades the answer: Math-Shepherd labels a finished solution by it.
    assert (ducks.final_answer, ducks.is_correct, robe.is_correct) == ("18", True, False)
    (run,) = AutoLabelRun.objects.all()
    assert (run.method, run.source) == ("imported", "math-shepherd")
    assert run.params == {"dataset": "math-shepherd", "kind": "automatic", "file_digest": importing.file_digest(path),
                          "file_name": "data.jsonl"}
    # Kept apart from human labels: no annotation, and the human exports do not see them.
    assert not Annotation.objects.exists() and not StepLabel.objects.exists()
    assert list(exporting.iter_rows(project=Project.objects.sole(), format="soft", options=ExportOptions())) == []


def test_processbench_first_errors_are_gold_labels_up_to_and_at_the_error(tmp_path):
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, PROCESSBENCH), format="processbench")
    assert (summary.created, summary.errors) == (2, 0)
    wrong, right = Solution.objects.order_by("id")
    assert auto_labels(wrong) == [1.0, 0.0, None]  # After the first error: not labeled.
    assert auto_labels(right) == [1.0, 1.0]
    assert (wrong.is_correct, right.is_correct) == (False, True)  # final_answer_correct, as given
    assert (wrong.generator, wrong.meta) == ("Qwen2-7B-Instruct", {"id": "gsm8k-0"})
    (run,) = AutoLabelRun.objects.all()
    assert (run.source, run.params["kind"]) == ("processbench", "gold")


def test_reimporting_a_dataset_adds_no_label_twice(tmp_path):
    path = write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "+++")])
    importing.import_pool(project=Project.objects.sole(), path=path)
    again = importing.import_pool(project=Project.objects.sole(), path=path)
    assert (again.created, again.duplicates) == (0, 1)
    assert AutoLabelRun.objects.count() == 1 and AutoStepLabel.objects.count() == 3
    # The same solution from another file of the dataset is labeled in that file's run too.
    importing.import_pool(project=Project.objects.sole(),
                          path=write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "+-+")], "other.jsonl"))
    assert AutoLabelRun.objects.count() == 2 and AutoStepLabel.objects.count() == 6


def test_bad_lines_are_named_by_line_and_field(tmp_path):
    good = shepherd(ROBE, ROBE_STEPS, "++-")
    shifted = dict(good, label=good["label"].replace("bolts of blue", "bolts of red"))
    lines = [
        good,
        dict(good, input=good["input"] + " and more"),
        shifted,
        dict(good, label=good["label"].replace(" +", " ?", 1)),
        {"input": "No step is numbered here. x ки", "label": "No step is numbered here. x +", "task": "MATH"},
    ]
    report = tmp_path / "report.jsonl"
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, lines), format="math_shepherd", report_path=report)
    errors = {e["line"]: e["error"] for e in map(json.loads, report.read_text().splitlines()) if e["error"]}
    assert summary.created == 1 and sorted(errors) == [2, 3, 4, 5]
    assert errors[2].startswith("field 'input': must end each step with the tag")
    assert errors[3].startswith("field 'label': does not match 'input' at step tag 1")
    assert errors[4].startswith("field 'label': does not match 'input' at step tag 1")
    assert errors[5] == "field 'input': has no 'Step 1:' where the problem ends and the steps begin"

    bad_bench = [PROCESSBENCH[0] | {"label": 3}, PROCESSBENCH[1] | {"final_answer_correct": "yes"},
                 PROCESSBENCH[1] | {"steps": []}]
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, bad_bench, "pb.jsonl"), format="processbench",
                                    report_path=report)
    errors = [e["error"] for e in map(json.loads, report.read_text().splitlines()) if e["error"]]
    assert errors == ["field 'label': must be -1 or a step index below 3, got 3",
                      "field 'final_answer_correct': must be a boolean, got a string",
                      "field 'steps': must be a non-empty list of strings, got a list"]


def test_an_atomic_import_with_a_bad_line_writes_no_solution_and_no_label(tmp_path):
    lines = [*PROCESSBENCH, PROCESSBENCH[0] | {"label": "first"}]
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=write(tmp_path, lines), format="processbench", atomic=True)
    assert summary.rolled_back
    assert not Solution.objects.exists() and not AutoLabelRun.objects.exists() and not AutoStepLabel.objects.exists()
