"""One rule for how big a solution Stepwise takes (steps/limits.py): imports and POST /api/score
refuse the same solutions, each naming where the excess is."""
import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from annotate.pool import importing
from scoring.web.api.serializers import ScoreRequestSerializer
from steps.limits import MAX_STEP_CHARS, MAX_STEPS, SolutionLimits, TooBig


def import_errors(tmp_path: Path, steps: list[str]) -> dict[int, str]:
    path, report = tmp_path / "pool.jsonl", tmp_path / "report.jsonl"
    path.write_text(json.dumps({"problem": "What is 1 + 1?", "ground_truth_answer": "2", "steps": steps}) + "\n")
    importing.import_pool(path=path, format="generic", report_path=report)
    entries = [json.loads(line) for line in report.read_text().splitlines()]
    return {e["line"]: e["error"] for e in entries if e["status"] == "error"}


def score_errors(reviewer, steps: list[str]) -> dict:
    api = APIClient()
    api.force_authenticate(reviewer)
    response = api.post("/api/score", {"problem": "What is 1 + 1?", "steps": steps}, format="json")
    assert response.status_code == 400, response.content
    return response.json()


def test_the_defaults_are_the_numbers_imports_always_had():
    assert (MAX_STEPS, MAX_STEP_CHARS) == (200, 10_000)
    assert SolutionLimits.of(object()) == SolutionLimits(200, 10_000)


def test_a_limit_names_the_field_and_the_setting_that_raises_it():
    limits = SolutionLimits(max_steps=2, max_step_chars=5)
    limits.check(["12345", "1"])
    with pytest.raises(TooBig) as many:
        limits.check(["a", "b", "c"])
    assert many.value.field == "steps"
    assert many.value.message == "has 3 steps; the limit is 2 (STEPWISE_IMPORT_MAX_STEPS)"
    with pytest.raises(TooBig) as long:
        limits.check(["a", "123456"])
    assert long.value.field == "steps[1]" and "STEPWISE_IMPORT_MAX_STEP_CHARS" in long.value.message
    with pytest.raises(TooBig, match=r"^label\.x: has 6 characters"):
        limits.check(["a"], others=[("label.x", "123456")])


@pytest.mark.django_db
@pytest.mark.parametrize(("steps", "field", "message"), [
    (["ok"] * (MAX_STEPS + 1), "steps",
     f"has {MAX_STEPS + 1} steps; the limit is {MAX_STEPS} (STEPWISE_IMPORT_MAX_STEPS)"),
    (["ok", "x" * (MAX_STEP_CHARS + 1)], "steps[1]",
     f"has {MAX_STEP_CHARS + 1:,} characters; the limit is {MAX_STEP_CHARS:,} (STEPWISE_IMPORT_MAX_STEP_CHARS)"),
])
def test_the_importer_and_the_api_refuse_the_same_solution_naming_the_same_field(tmp_path, reviewer, steps, field,
                                                                                 message):
    assert import_errors(tmp_path, steps) == {1: f"field '{field}': {message}"}
    assert score_errors(reviewer, steps) == {"steps": [f"{field} {message}"]}


@pytest.mark.django_db
def test_the_largest_solution_an_import_takes_the_api_takes_too(tmp_path, reviewer, settings):
    # Both read the settings when they check, so one override moves both.
    settings.STEPWISE_IMPORT_MAX_STEPS, settings.STEPWISE_IMPORT_MAX_STEP_CHARS = 3, 120
    largest = ["1 + 1 = 2. " + "x" * 109] * 3
    assert import_errors(tmp_path, largest) == {}
    assert ScoreRequestSerializer(data={"problem": "What is 1 + 1?", "steps": largest}).is_valid()
    refused = score_errors(reviewer, [*largest, "one more"])
    assert refused == {"steps": ["steps has 4 steps; the limit is 3 (STEPWISE_IMPORT_MAX_STEPS)"]}
    assert import_errors(tmp_path, [*largest, "one more"]) == {
        1: "field 'steps': has 4 steps; the limit is 3 (STEPWISE_IMPORT_MAX_STEPS)"}
