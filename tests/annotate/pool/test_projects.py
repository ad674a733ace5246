"""The pool, imports and exports are a project's: the same text may sit in two projects, each
holding its own copy, and an export of one project holds nothing of another's."""
import copy
import json

import pytest

from annotate.models import (
    Annotation,
    AutoLabelRun,
    ImportJob,
    Problem,
    Project,
    QueueItem,
    SampleLine,
    Solution,
    Step,
)
from annotate.pool import exporting, importing
from annotate.pool.exporting import ExportOptions
from tests.annotate.pool.test_import_prm_datasets import DUCK_STEPS, DUCKS, ROBE, ROBE_STEPS, shepherd, write
from tests.annotations import PHASE1_LINE, PHASE2_LINE, annotate, import_lines
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_projects():
    return (Project.objects.create(slug="alpha", name="Alpha"), Project.objects.create(slug="beta", name="Beta"))


def generic(problem: str, answer: str, steps: list[str]) -> dict:
    return {"problem": problem, "ground_truth_answer": answer, "steps": steps}


def test_the_same_text_imported_into_two_projects_is_one_copy_in_each(two_projects, tmp_path):
    alpha, beta = two_projects
    line = generic("What is 2 + 3?", "5", ["2 + 3 = 5.", "# Answer\n\n5"])
    first = importing.import_pool(project=alpha, path=write(tmp_path, [line], "a.jsonl"))
    # Another file with the same text (the same file: see the next test).
    other_file = write(tmp_path, [{**line, "meta": {"file": "b"}}], "b.jsonl")
    second = importing.import_pool(project=beta, path=other_file)
    again = importing.import_pool(project=beta, path=other_file)

    assert (first.created, second.created, again.created, again.duplicates) == (1, 1, 0, 1)
    in_alpha, in_beta = Solution.objects.get(project=alpha), Solution.objects.get(project=beta)
    assert in_alpha.content_hash == in_beta.content_hash and in_alpha.pk != in_beta.pk
    assert (in_alpha.problem.project, in_beta.problem.project) == (alpha, beta)
    assert Problem.objects.filter(project=beta).count() == 1
    assert [s.text for s in in_beta.steps.order_by("index")] == line["steps"]
    assert (in_alpha.sample_count, in_beta.sample_count) == (1, 1)


def test_the_same_file_imported_into_two_projects_counts_its_samples_in_each(two_projects, tmp_path):
    alpha, beta = two_projects
    path = write(tmp_path, [generic("What is 2 + 3?", "5", ["2 + 3 = 5.", "# Answer\n\n5"])] * 2)
    importing.import_pool(project=alpha, path=path)
    summary = importing.import_pool(project=beta, path=path)
    assert (summary.created, summary.duplicates, summary.errors) == (1, 1, 0)
    assert Solution.objects.get(project=beta).sample_count == 2
    assert SampleLine.objects.filter(solution__project=beta).count() == 2


def test_everything_an_import_writes_is_in_its_project(two_projects, tmp_path):
    alpha, beta = two_projects
    importing.import_pool(project=beta, path=write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "++-")], "s.jsonl"))
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE], project=beta)
    for model in (Problem, Solution, Annotation, AutoLabelRun):
        assert model.objects.exists() and not model.objects.exclude(project=beta).exists(), model.__name__
    assert not Solution.objects.filter(problem__project=alpha).exists()


def test_an_import_job_writes_into_its_project_and_queues_there(two_projects, tmp_path):
    alpha, beta = two_projects
    path = write(tmp_path, [generic("What is 2 + 3?", "5", ["2 + 3 = 5.", "# Answer\n\n6"])])
    job = importing.create_import_job(project=beta, path=path)
    job = importing.run_import_job(job_id=job.pk)
    assert (job.state, job.created, job.queued) == ("succeeded", 1, 1)
    assert set(Solution.objects.values_list("project__slug", flat=True)) == {"beta"}
    assert set(QueueItem.objects.values_list("project__slug", flat=True)) == {"beta"}
    assert ImportJob.objects.get().project == beta


def _labeled(project: Project, text: str, ratings: list[int]) -> Solution:
    solution = SolutionFactory(project=project, problem__project=project, problem__statement=text, steps=["a", "b"])
    annotate(solution, ratings, labeler=f"{project.slug}-labeler")
    return solution


@pytest.fixture
def labeled_in_both(two_projects, tmp_path):
    """Each project with its own labeled solutions, the same PRM800K lines, and automatic labels."""
    alpha, beta = two_projects
    for project in two_projects:
        import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE], project=project)
        _labeled(project, f"Only in {project.slug}: what is 1 + 1?", [1, -1])
        _labeled(project, f"Also only in {project.slug}: what is 2 + 2?", [1, 1])
    importing.import_pool(project=beta, path=write(tmp_path, [shepherd(ROBE, ROBE_STEPS, "+-+")], "robe.jsonl"))
    importing.import_pool(project=alpha, path=write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "++-")], "ducks.jsonl"))
    return two_projects


def _read_back(tmp_path, project: Project, format: str, labels: str) -> list[dict]:
    out = tmp_path / f"{project.slug}-{format}-{labels}.jsonl"
    exporting.write_export(project=project, path=out, format=format, options=ExportOptions(labels=labels))
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _problem_of(row: dict) -> str:
    return row["question"]["problem"] if "question" in row else row.get("problem") or row["prompt"]


@pytest.mark.parametrize(("format", "labels"), [
    ("prm800k", "human"), ("prm800k", "both"), ("trl", "both"), ("processbench", "human"), ("soft", "both"),
])
def test_an_export_of_one_project_holds_none_of_anothers_rows(labeled_in_both, tmp_path, format, labels):
    alpha, beta = labeled_in_both
    rows = _read_back(tmp_path, alpha, format, labels)

    assert rows, "the export of alpha has rows"
    problems = {_problem_of(row) for row in rows}
    alphas = set(Problem.objects.filter(project=alpha).values_list("statement", flat=True))
    assert problems <= alphas
    assert not any("beta" in problem for problem in problems) and ROBE not in problems
    if format == "soft":  # its rows name the solution: all alpha's
        assert {row["id"] for row in rows} <= set(Solution.objects.filter(project=alpha).values_list("pk", flat=True))
    if format == "prm800k":
        assert {row["labeler"] for row in rows}.isdisjoint({"beta-labeler"})
        assert all("beta" not in text for row in rows for text in row["question"].get("pre_generated_steps") or [])
    # What the job's progress counts is alpha's too.
    if labels == "human" and not exporting.FORMATS[format].per_solution:
        mine = Annotation.objects.filter(project=alpha, status="submitted", is_quality_control=False)
        assert exporting.count_inputs(project=alpha, format=format, options=ExportOptions()) == mine.count()


def test_an_export_job_exports_its_own_project(labeled_in_both, admin_user, settings, tmp_path):
    settings.EXPORTS_DIR = tmp_path / "exports"
    alpha, beta = labeled_in_both
    job = exporting.create_export_job(project=beta, format="prm800k", options=ExportOptions(), user=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    lines = [json.loads(line) for line in open(job.path, encoding="utf-8")]
    assert job.lines == len(lines) == Annotation.objects.filter(project=beta, is_quality_control=False).count()
    assert {line["labeler"] for line in lines} >= {"beta-labeler"} and "alpha-labeler" not in {
        line["labeler"] for line in lines}


def test_a_prm800k_line_carries_the_guideline_version_its_annotation_was_made_under(two_projects, tmp_path):
    alpha, _ = two_projects
    stamped = _labeled(alpha, "What is 3 + 3?", [1, 1])
    Annotation.objects.filter(solution=stamped).update(guideline_version=3)
    unstamped = _labeled(alpha, "What is 4 + 4?", [1, 1])

    by_problem = {row["question"]["problem"]: row for row in _read_back(tmp_path, alpha, "prm800k", "human")}

    assert by_problem[stamped.problem.statement]["guideline_version"] == 3
    # Unknown (imported labels, labels from before projects): no key, the line is PRM800K's own.
    assert "guideline_version" not in by_problem[unstamped.problem.statement]


def test_an_imported_prm800k_line_is_written_back_byte_for_byte_in_its_project(two_projects, tmp_path):
    alpha, beta = two_projects
    line = copy.deepcopy(PHASE2_LINE)
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps(line, ensure_ascii=False, separators=(", ", ": ")) + "\n", encoding="utf-8")
    importing.import_pool(project=alpha, path=source, format="prm800k")
    importing.import_pool(project=beta, path=source, format="prm800k")
    out = tmp_path / "alpha.jsonl"
    exporting.write_export(project=alpha, path=out, format="prm800k", options=ExportOptions(include_qc=True))
    assert out.read_bytes() == source.read_bytes()
    assert Step.objects.filter(solution__project=beta).count() == Step.objects.filter(solution__project=alpha).count()


def test_a_parquet_prm800k_export_has_the_guideline_version_column(two_projects, tmp_path):
    import pyarrow.parquet as pq

    alpha, _ = two_projects
    stamped = _labeled(alpha, "What is 5 + 5?", [1, 1])
    Annotation.objects.filter(solution=stamped).update(guideline_version=2)
    _labeled(alpha, "What is 6 + 6?", [1, 1])
    folder = tmp_path / "pq"
    exporting.write_export(project=alpha, path=folder, format="prm800k", options=ExportOptions(container="parquet"))
    table = pq.read_table(folder / "data" / "train.parquet")
    assert sorted(table.column("guideline_version").to_pylist(), key=str) == [2, None]
