"""Sample multiplicity: identical responses are one solution, and every line of them a sample.

Built on the 160 real Qwen2.5-Math responses (20 problems x 8 samples), 17 of which repeat
another response to the same problem word for word.
"""
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from annotate.models import Project, SampleLine, Solution
from annotate.pool import importing
from scoring.core import evaluation
from tests.conftest import TEST_DATA

pytestmark = [pytest.mark.embedded, pytest.mark.django_db]

RESPONSES = TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"


def real_lines() -> list[dict]:
    """One generic line per real response, in the file's order (problem by problem)."""
    rows = [json.loads(line) for line in RESPONSES.open()]
    return [
        {"problem": row["question"], "ground_truth_answer": row["answer"], "solution": response,
         "generator": "qwen2.5-math"}
        for row in rows for response in row["response"]
    ]


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def responses_file(tmp_path) -> Path:
    return write(tmp_path / "qwen-responses.jsonl", real_lines())


def test_the_real_responses_repeat_so_these_tests_can_fail():
    lines = real_lines()
    distinct = {(line["problem"], line["solution"]) for line in lines}
    assert (len(lines), len(distinct)) == (160, 143)


def test_a_duplicate_response_is_one_solution_counted_once_per_line_with_its_source_lines(responses_file, tmp_path):
    report = tmp_path / "report.jsonl"
    summary = importing.import_pool(project=Project.objects.sole(), path=responses_file, report_path=report)
    assert (summary.created, summary.duplicates) == (143, 17)
    assert Solution.objects.count() == 143
    assert sum(Solution.objects.values_list("sample_count", flat=True)) == 160
    # Every problem keeps its eight samples, duplicates included.
    per_problem = Counter()
    for problem_id, count in Solution.objects.values_list("problem_id", "sample_count"):
        per_problem[problem_id] += count
    assert set(per_problem.values()) == {8}
    # Each duplicate line is kept as a source of the solution the report names.
    entries = [json.loads(line) for line in report.read_text().splitlines()]
    for entry in entries:
        line = SampleLine.objects.get(line_no=entry["line"])
        assert line.solution_id == entry["solution"]
        assert line.file_name == "qwen-responses.jsonl"
    repeated = Solution.objects.filter(sample_count__gt=1).first()
    assert repeated.sample_lines.count() == repeated.sample_count


def test_importing_the_same_file_again_counts_no_sample_twice(responses_file):
    importing.import_pool(project=Project.objects.sole(), path=responses_file)
    before = dict(Solution.objects.values_list("pk", "sample_count"))
    again = importing.import_pool(project=Project.objects.sole(), path=responses_file)
    assert (again.created, again.duplicates) == (0, 160)
    assert dict(Solution.objects.values_list("pk", "sample_count")) == before
    assert SampleLine.objects.count() == 160


def test_the_same_responses_in_another_file_are_more_samples(responses_file, tmp_path):
    importing.import_pool(project=Project.objects.sole(), path=responses_file)
    first_problem = real_lines()[:8]
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path / "more-samples.jsonl", first_problem))
    counts = Counter()
    for line in SampleLine.objects.select_related("solution"):
        counts[line.solution.problem_id] += 1
    assert sorted(counts.values()) == [8] * 19 + [16]
    assert sum(Solution.objects.values_list("sample_count", flat=True)) == 168


def test_an_atomic_import_that_rolls_back_leaves_no_sample(responses_file, tmp_path):
    bad = write(tmp_path / "bad.jsonl", [*real_lines()[:8], {"problem": "no answer"}])
    summary = importing.import_pool(project=Project.objects.sole(), path=bad, atomic=True)
    assert summary.rolled_back and summary.solution_ids == set()
    assert not SampleLine.objects.exists() and not Solution.objects.exists()


def test_prm800k_lines_are_annotations_not_samples(tmp_path):
    from tests.annotate.pool.test_prm800k import PHASE2

    line = PHASE2
    other = {**line, "labeler": "someone-else"}
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path / "prm.jsonl", [line, other]))
    assert Solution.objects.get().sample_count == 1
    assert not SampleLine.objects.exists()


def _candidates_by_problem() -> list[list[evaluation.Candidate]]:
    """The imported solutions as best-of-N candidates, with a constant score (only votes matter)."""
    by_problem: dict[int, list[evaluation.Candidate]] = defaultdict(list)
    for solution in Solution.objects.order_by("pk"):
        by_problem[solution.problem_id].append(evaluation.Candidate(
            mu=[0.5], correct=bool(solution.is_correct), answer=solution.final_answer, count=solution.sample_count))
    return [by_problem[p] for p in sorted(by_problem)]


def test_majority_vote_and_best_of_n_count_every_sample_of_the_real_responses(responses_file):
    importing.import_pool(project=Project.objects.sole(), path=responses_file)
    problems = _candidates_by_problem()
    assert sum(len(c) < 8 for c in problems) > 0  # without the counts these problems drop out at N=8
    table = evaluation.best_of_n(problems, ns=[8])["by_n"]["8"]
    assert table["problems"] == 20
    # N=8 is every sample of a problem: the majority is the vote over all eight lines of the file.
    answer_of_line = dict(SampleLine.objects.values_list("line_no", "solution__final_answer"))
    expected = [Counter(answer_of_line[n] for n in range(first, first + 8)) for first in range(1, 161, 8)]
    unambiguous = [i for i, votes in enumerate(expected) if _unique_top(votes)]
    assert len(unambiguous) >= 15
    for i in unambiguous:
        winner = expected[i].most_common(1)[0][0]
        only = evaluation.best_of_n([problems[i]], ns=[8])["by_n"]["8"]["majority"]
        assert only == float(next(c.correct for c in problems[i] if c.answer == winner))


def _unique_top(votes: Counter) -> bool:
    top = votes.most_common(2)
    return len(top) == 1 or top[0][1] > top[1][1]


def test_the_api_gives_each_solution_its_sample_count(responses_file, admin_user):
    from tests.annotate.web.test_api import client_for

    importing.import_pool(project=Project.objects.sole(), path=responses_file)
    repeated = Solution.objects.filter(sample_count__gt=1).first()
    answer = client_for(admin_user).get(f"/api/solutions/{repeated.pk}").json()
    assert answer["sample_count"] == repeated.sample_count > 1
