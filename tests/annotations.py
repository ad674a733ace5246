"""Submitted annotations for tests: made directly in the database (PRM800K phase-2 style), or
imported from the PRM800K fixture lines below."""
import json
from pathlib import Path

from django.utils import timezone

from annotate.models import Annotation, Completion, StepLabel
from annotate.pool import importing


def annotate(solution, ratings: list[int], *, labeler: str = "lab-1", annotator=None, generation: int | None = 1,
             finish_reason: str | None = None, quality_control: bool = False, timestamp=None,
             status: str = Annotation.Status.SUBMITTED) -> Annotation:
    """One annotation rating the solution's steps in order; a -1 step ends it (found_error)."""
    steps = list(solution.steps.order_by("index"))
    if finish_reason is None:
        finish_reason = "found_error" if -1 in ratings else "solution"
    annotation = Annotation.objects.create(
        solution=solution, project_id=solution.project_id, labeler=labeler, annotator=annotator, status=status,
        generation=generation,
        finish_reason=finish_reason, is_quality_control=quality_control, total_time_ms=1000,
        timestamp=timestamp or timezone.now(),
    )
    for step, rating in zip(steps, ratings):
        last = rating == -1
        label = StepLabel.objects.create(annotation=annotation, index=step.index, chosen_completion=None if last else 0)
        Completion.objects.create(step_label=label, index=0, text=step.text, rating=rating, flagged=False)
        if last:
            break
    return annotation


GCF_STEPS = [
    "I want to find the largest positive integer that divides both $20 !$ and $200,\\!000$ evenly.",
    "One way to do this is to factor both numbers into prime factors and look for the common ones.",
    "I know that $200,\\!000 = 2^5\\cdot 10^4 = 2^9\\cdot 5^4$.",
    "So the greatest common factor is $2^9\\cdot 5^4 / 100 = 5000$.",
    "# Answer\n\n5000",
]

# Phase 2: pre-generated steps, labeling stops at the first -1 (found_error).
PHASE2_LINE = {
    "labeler": "340d89bc-f5b7-45e9-b272-909ba68ee363",
    "timestamp": "2023-01-22T04:34:27.052924",
    "generation": 9,
    "is_quality_control_question": False,
    "is_initial_screening_question": False,
    "question": {
        "problem": "What is the greatest common factor of $20 !$ and $200,\\!000$?",
        "ground_truth_solution": "The prime factorization of $200,\\!000$ is $2^6 \\cdot 5^5$. ...",
        "ground_truth_answer": "40,\\!000",
        "pre_generated_steps": GCF_STEPS,
        "pre_generated_answer": "5000",
        "pre_generated_verifier_score": 0.0014479177568580065,
    },
    "label": {
        "steps": [
            {"completions": [{"text": GCF_STEPS[0], "rating": 1, "flagged": False}],
             "human_completion": None, "chosen_completion": 0},
            {"completions": [{"text": GCF_STEPS[1], "rating": 0, "flagged": False}],
             "human_completion": None, "chosen_completion": 0},
            {"completions": [{"text": GCF_STEPS[2], "rating": -1, "flagged": True}],
             "human_completion": None, "chosen_completion": None},
        ],
        "total_time": 278270,
        "finish_reason": "found_error",
    },
}

# Phase 1: no pre-generated solution; alternative completions per step and a human step. Step 2
# was replaced by a human completion; its rejected alternative 0 is rated -1, so a reader that
# takes completion 0 reads (1, -1) where the verdict is (1, 1).
PHASE1_LINE = {
    "labeler": "e90a38f3-3135-4465-87af-3e6322e3d772",
    "timestamp": "2022-07-17T16:56:51.323252",
    "generation": None,
    "is_quality_control_question": False,
    "is_initial_screening_question": False,
    "question": {
        "problem": "How many vertical asymptotes does the graph of $y=\\frac{2}{x^2+x-6}$ have?",
        "ground_truth_answer": "2",
    },
    "label": {
        "steps": [
            {"completions": [
                {"text": "The denominator factors as $(x+3)(x-2)$.", "rating": 1, "flagged": None},
                {"text": "The denominator factors as $(x-3)(x+2)$.", "rating": -1, "flagged": None},
            ], "human_completion": None, "chosen_completion": 0},
            {"completions": [
                {"text": "So there are asymptotes at $x=3$ and $x=-2$.", "rating": -1, "flagged": None},
                {"text": "The numerator is never zero, so there is no hole.", "rating": 0, "flagged": None},
            ], "human_completion": {"text": "The zeros $x=-3$ and $x=2$ give two asymptotes.\n\n# Answer\n\n2",
                                    "rating": None, "source": "human", "flagged": False},
               "chosen_completion": None},
        ],
        "total_time": 190322,
        "finish_reason": "solution",
    },
}


def import_lines(tmp_path: Path, lines: list[dict]) -> None:
    """Import PRM800K lines as the import page would; no line may fail."""
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = importing.import_pool(path=path, format="prm800k")
    assert summary.errors == 0, summary.first_errors


BLIND = {"mode": "blind", "second_look": False}  # what every export row says of unassisted annotations


def without_assistance(rows: list[dict]) -> list[dict]:
    """Export rows without their `assistance` key (what the annotators saw: tests/annotate/
    test_export_assistance.py), for comparing the rest with what another tool writes."""
    return [{key: value for key, value in row.items() if key != "assistance"} for row in rows]
