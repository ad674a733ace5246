"""Every export format as Parquet and as a `datasets` folder, read back with `datasets`: the same
rows as the JSONL export, in order, with a dataset card that says what they mean. A format the
importer reads too is read back into an empty pool, which then holds what its rows say."""
import json
import zipfile

import pytest
from django.core.management import call_command

from annotate.models import AutoLabelRun, ExportJob, Problem, Project, Solution
from annotate.pool import exporting, importing
from annotate.pool.exporting import ExportOptions
from jobs.states import JobState
from tests.annotations import PHASE1_LINE, PHASE2_LINE, annotate, import_lines
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def labels(tmp_path):
    """PRM800K lines (alternatives, a human completion, a found error) and graded pool solutions."""
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    wrong = SolutionFactory(steps=["a", "b", "c"], is_correct=False, generator="Qwen2.5-Math-7B")
    annotate(wrong, [1, -1], labeler="x")
    annotate(wrong, [1, 0, -1], labeler="y")
    annotate(SolutionFactory(steps=["d", "e"], is_correct=True), [1, 0], labeler="x")


def jsonl_rows(tmp_path, format: str, *extra: str) -> list[dict]:
    out = tmp_path / f"{format}.jsonl"
    call_command("export_prm800k", str(out), "--format", format, *extra)
    return [json.loads(line) for line in out.read_text().splitlines()]


def prm800k_meaning(line: dict) -> dict:
    """What a PRM800K line says: who, which problem and steps, every rating and flag, the path, the end."""
    steps = [([(c["text"], c["rating"], c["flagged"]) for c in step["completions"]], step["chosen_completion"],
              (step["human_completion"] or {}).get("text")) for step in line["label"]["steps"]]
    return {"labeler": line["labeler"], "problem": line["question"]["problem"],
            "pool": line["question"].get("pre_generated_steps"), "steps": steps,
            "finish_reason": line["label"]["finish_reason"], "generation": line["generation"]}


@pytest.mark.parametrize("format", exporting.FORMATS)
def test_a_parquet_export_loads_with_load_dataset_as_the_jsonl_rows(labels, tmp_path, format):
    import datasets

    expected = jsonl_rows(tmp_path, format, "--neutral", "bad")
    folder = tmp_path / f"{format}-parquet"
    call_command("export_prm800k", str(folder), "--format", format, "--neutral", "bad", "--container", "parquet")
    table = datasets.load_dataset("parquet", data_files=str(folder / "data" / "train.parquet"), split="train")
    assert len(expected) > 0 and table.num_rows == len(expected)
    if format == "prm800k":
        assert [prm800k_meaning(row) for row in table] == [prm800k_meaning(row) for row in expected]
    else:
        assert table.to_list() == expected
    card = (folder / "README.md").read_text()
    assert f"- rows: {len(expected)}" in card and "only +1 is good" in card
    assert "path: data/train.parquet" in card  # The Hub reads the card's configs.
    for column in table.column_names:
        assert f"| `{column}` |" in card


@pytest.mark.parametrize("format", exporting.FORMATS)
def test_an_hf_dataset_export_loads_with_load_from_disk_as_the_jsonl_rows(labels, tmp_path, format):
    import datasets

    expected = jsonl_rows(tmp_path, format)
    folder = tmp_path / f"{format}-hf"
    call_command("export_prm800k", str(folder), "--format", format, "--container", "hf_dataset")
    table = datasets.load_from_disk(str(folder))
    if format == "prm800k":
        assert [prm800k_meaning(row) for row in table] == [prm800k_meaning(row) for row in expected]
    else:
        assert table.to_list() == expected
    assert "a neutral (0) rating counts as good" in (folder / "README.md").read_text()


def test_typed_columns_survive_an_export_with_no_rows(tmp_path):
    import datasets
    import pyarrow.parquet as pq

    call_command("export_prm800k", str(tmp_path / "hf"), "--format", "processbench", "--container", "hf_dataset")
    table = datasets.load_from_disk(str(tmp_path / "hf"))
    assert table.num_rows == 0
    assert table.features["label"] == datasets.Value("int64")
    assert table.features["steps"].feature == datasets.Value("string")
    assert "- rows: 0" in (tmp_path / "hf" / "README.md").read_text()
    # load_dataset("parquet") finds no split in a file with no rows; the file still has the types.
    call_command("export_prm800k", str(tmp_path / "pq"), "--format", "processbench", "--container", "parquet")
    schema = pq.read_schema(tmp_path / "pq" / "data" / "train.parquet")
    assert datasets.Features.from_arrow_schema(schema) == table.features


def test_an_export_job_in_a_dataset_container_downloads_as_one_zip(labels, tmp_path, admin_user, client):
    import datasets

    options = ExportOptions.from_dict({"container": "hf_dataset"})
    job = ExportJob.objects.create(format="soft", options=options.to_dict(), created_by=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    assert job.state == JobState.SUCCEEDED and job.lines == 4, job.error  # 2 PRM800K solutions, 2 pool ones
    client.force_login(admin_user)
    response = client.get(f"/jobs/export/{job.pk}/download")
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].endswith('-hf_dataset.zip"')
    archive = tmp_path / "download.zip"
    archive.write_bytes(b"".join(response.streaming_content))
    with zipfile.ZipFile(archive) as zipped:
        (top,) = {name.split("/")[0] for name in zipped.namelist()}
        zipped.extractall(tmp_path / "unzipped")
    table = datasets.load_from_disk(str(tmp_path / "unzipped" / top))
    assert table.to_list() == jsonl_rows(tmp_path, "soft")


@pytest.fixture
def umask():
    """A umask unlike the usual 022, so that a mode merely matching the common default shows nothing."""
    import os

    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def test_every_export_file_gets_the_mode_of_a_newly_created_file_whatever_the_container(labels, tmp_path, umask):
    outputs = {"jsonl": tmp_path / "out.jsonl", "parquet": tmp_path / "pq", "hf_dataset": tmp_path / "hf",
               "parquet as one zip": tmp_path / "pq.zip"}
    for container, out in outputs.items():
        call_command("export_prm800k", str(out), "--format", "trl", "--container", container.split()[0])
    files = [path for out in outputs.values() for path in (out.rglob("*") if out.is_dir() else [out])
             if path.is_file()]
    modes = {path.relative_to(tmp_path).as_posix(): oct(path.stat().st_mode & 0o777) for path in files}
    assert {"out.jsonl", "pq/data/train.parquet", "hf/README.md", "pq.zip"} <= set(modes)
    assert set(modes.values()) == {oct(0o666 & ~umask)}, modes


def first_gold_error(solution: Solution) -> int:
    """The first step an imported gold label calls bad; -1 when none is."""
    bad = solution.steps.filter(auto_labels__soft=0.0).order_by("index").values_list("index", flat=True)
    return next(iter(bad), -1)


def processbench_in_pool() -> list[dict]:
    return [{"problem": s.problem.statement, "steps": [step.text for step in s.steps.all()],
             "final_answer_correct": s.is_correct, "label": first_gold_error(s), "generator": s.generator}
            for s in Solution.objects.select_related("problem").order_by("id")]


# What the pool holds after importing an export, in the export's own terms (the rows, or the keys
# the pool keeps of them): a PRM800K line is an annotation again, a ProcessBench row gold labels.
READ_BACK = {
    "prm800k": (lambda tmp_path: jsonl_rows(tmp_path, "prm800k"), None),
    "processbench": (lambda tmp_path: processbench_in_pool(),
                     ("problem", "steps", "final_answer_correct", "label", "generator")),
}


def test_every_format_the_importer_reads_has_its_read_back_here():
    assert set(READ_BACK) == set(exporting.FORMATS) & set(importing.FORMATS)


@pytest.mark.parametrize("name", READ_BACK)
def test_an_export_the_importer_reads_is_read_back_into_an_empty_pool_as_it_was(labels, tmp_path, name):
    rows = jsonl_rows(tmp_path, name)
    Problem.objects.all().delete()
    AutoLabelRun.objects.all().delete()
    summary = importing.import_pool(project=Project.objects.sole(),
                                    path=tmp_path / f"{name}.jsonl")  # the format is detected
    assert (summary.format, summary.created, summary.errors) == (name, len(rows), 0)
    read_back, keys = READ_BACK[name]
    assert read_back(tmp_path / "again") == [{k: row[k] for k in keys} if keys else row for row in rows]


def test_a_bad_container_is_refused_naming_the_option():
    with pytest.raises(exporting.ExportError, match="container: unknown 'csv'"):
        ExportOptions.from_dict({"container": "csv"})


def test_the_export_page_offers_the_container_and_the_labels(client, admin_user):
    client.force_login(admin_user)
    page = client.get("/exports/").content.decode()
    assert 'name="container"' in page and 'value="hf_dataset"' in page and 'name="labels"' in page
    response = client.post("/exports/", {"format": "trl", "neutral_is_good": "1", "container": "parquet",
                                         "labels": "both"})
    job = ExportJob.objects.get()
    assert response.status_code == 302
    assert (job.options["container"], job.options["labels"]) == ("parquet", "both")
    assert exporting.export_path(job).name == f"export-{job.pk}-trl-parquet.zip"
    refused = client.post("/exports/", {"format": "processbench", "neutral_is_good": "1", "labels": "automatic"})
    assert refused.status_code == 200 and "ProcessBench takes human labels only" in refused.content.decode()
    assert ExportJob.objects.count() == 1


def test_the_api_starts_a_parquet_export_and_serves_it_as_a_zip(labels, admin_user, tmp_path):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(admin_user)
    created = client.post("/api/exports", {"format": "trl", "container": "parquet", "labels": "both"},
                          format="json").json()
    exporting.run_export_job(job_id=created["id"])
    download = client.get(client.get(f"/api/exports/{created['id']}").json()["download_url"])
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    (tmp_path / "api.zip").write_bytes(b"".join(download.streaming_content))
    with zipfile.ZipFile(tmp_path / "api.zip") as zipped:
        assert any(name.endswith("/data/train.parquet") for name in zipped.namelist())
    refused = client.post("/api/exports", {"format": "processbench", "labels": "automatic"}, format="json")
    assert refused.status_code == 400 and "processbench takes human labels only" in refused.json()["labels"][0]
