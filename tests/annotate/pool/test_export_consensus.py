"""Judge labels and consensus labels in exports: a verifier model's verdicts alone (`--labels judge`),
and only the steps where the chosen sources agree (`--labels consensus`, Qwen's consensus filtering),
with the card saying how many steps each rule kept. Judge and rollout labels never pass for human ones."""
import json

import pytest
from django.core.management import CommandError, call_command

from annotate.models import AutoLabelRun, AutoStepLabel, ExportJob, Project
from annotate.pool import exporting
from annotate.pool.exporting import ExportError, ExportOptions, ExportTally
from tests.annotations import annotate
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db

STEPS = ["x = 2.", "2x = 4.", "2x + 1 = 6.", "So 6.", "# Answer\n\n6"]


def rows(format: str, tally: ExportTally | None = None, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format=format, options=ExportOptions(**options),
                                    tally=tally))


def label_steps(solution, method: str, words: dict[int, tuple[int | None, float, str]]) -> AutoLabelRun:
    """A run of `method` saying, of the steps at the given indexes: (K of 4 rollouts or None, soft, critique)."""
    run = AutoLabelRun.objects.create(method=method, source="verifier-7b" if method == "judge" else "policy-7b")
    for index, (k, soft, critique) in words.items():
        AutoStepLabel.objects.create(run=run, step=solution.steps.get(index=index), soft=soft, critique=critique,
                                     n_rollouts=None if k is None else 4, n_correct=k)
    return run


@pytest.fixture
def mixed():
    """Rollouts and a judge on one solution, with known agreements:
    step 0 both good; step 1 rollouts good, judge bad; step 2 the judge silent; step 3 both bad;
    step 4 both bad again, after the first agreed bad step. A second solution they agree on throughout."""
    solution = SolutionFactory(steps=STEPS)
    label_steps(solution, "math_shepherd", {0: (4, 1.0, ""), 1: (1, 0.25, ""), 2: (2, 0.5, ""), 3: (0, 0.0, ""),
                                            4: (0, 0.0, "")})
    label_steps(solution, "judge", {0: (None, 0.9, "Sets x."), 1: (None, 0.2, "Should be 4; it is."),
                                    3: (None, 0.1, "2x + 1 = 5, not 6."), 4: (None, 0.05, "Wrong answer.")})
    agreed = SolutionFactory(steps=["a", "b"])
    label_steps(agreed, "math_shepherd", {0: (3, 0.75, ""), 1: (4, 1.0, "")})
    label_steps(agreed, "judge", {0: (None, 0.8, "Fine."), 1: (None, 0.7, "Fine too.")})
    return solution, agreed


def test_the_consensus_export_keeps_exactly_the_agreed_steps(mixed):
    solution, agreed = mixed
    first, second = rows("soft", labels="consensus")
    assert (first["id"], first["label_source"], first["annotations"]) == (solution.id, "consensus", 0)
    # Kept: step 0 (good) and step 3 (bad); 1 disagreed, 2 had a silent judge, 4 comes after the first bad one.
    assert first["soft_labels"] == [1.0, None, None, 0.0, None]
    assert (first["k"], first["n"]) == ([1, 0, 0, 0, 0], [1, 0, 0, 1, 0])
    assert second["soft_labels"] == [1.0, 1.0]
    # TRL rows are prefixes: the first solution's row is cut before the step the sources disagreed on.
    assert [(row["completions"], row["labels"]) for row in rows("trl", labels="consensus")] == [
        (STEPS[:1], [True]), (["a", "b"], [True, True])]
    assert [(row["label"], row["value"]) for row in rows("openrlhf", labels="consensus")] == [
        (["+"], [1.0]), (["+", "+"], [1.0, 1.0])]


def test_the_consensus_counts_every_step_by_the_rule_that_kept_or_dropped_it(mixed):
    tally = ExportTally()
    rows("soft", tally, labels="consensus")
    assert dict(tally.consensus) == {"seen": 6, "kept_good": 3, "kept_bad": 1, "silent": 1, "disagreed": 1,
                                     "after_first_error": 1}
    assert tally.report()["consensus"] == dict(tally.consensus)


def test_the_card_says_how_many_steps_each_rule_kept(mixed, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    call_command("export_prm800k", str(tmp_path / "pq"), "--format", "soft", "--labels", "consensus",
                 "--consensus", "rollouts,judge", "--container", "parquet")
    card = (tmp_path / "pq" / "README.md").read_text()
    assert "**Label source**: consensus of rollouts, judge" in card
    for line in ("steps seen (up to each solution's first agreed bad step): 6",
                 "kept as good (every source said good): 3", "kept as bad (every source said bad): 1",
                 "dropped: a source said nothing of the step: 1", "dropped: the sources disagreed: 1",
                 "after the first agreed bad step (not labeled, as in PRM800K): 1"):
        assert f"  - {line}" in card
    assert "Consensus rows:" in card


def test_human_and_judge_consensus_reads_the_annotators_majority(mixed):
    solution, _ = mixed
    annotate(solution, [1, -1], labeler="x")  # agrees with the judge on steps 0 and 1, not with the rollouts
    tally = ExportTally()
    (row,) = rows("soft", tally, labels="consensus", consensus=("human", "judge"))
    assert row["soft_labels"] == [1.0, 0.0, None, None, None]
    assert dict(tally.consensus) == {"seen": 2, "kept_good": 1, "kept_bad": 1, "after_first_error": 3}
    # All three: step 1 is where rollouts part from the others.
    (row,) = rows("soft", labels="consensus", consensus=("human", "rollouts", "judge"))
    assert row["soft_labels"] == [1.0, None, None, None, None]


def test_judge_labels_export_alone_with_the_judges_probability(mixed):
    solution, agreed = mixed
    first, second = rows("soft", labels="judge")
    assert first["soft_labels"] == [0.9, 0.2, None, 0.1, 0.05] and first["label_source"] == "judge"
    assert (first["k"], first["n"]) == ([1, 0, 0, 0, 0], [1, 1, 0, 1, 1])
    assert second["soft_labels"] == [0.8, 0.7]
    # TRL: up to the first step the judge skipped; the rollouts' word appears nowhere.
    assert [(row["completions"], row["labels"], row["label_source"]) for row in rows("trl", labels="judge")] == [
        (STEPS[:2], [True, False], "judge"), (["a", "b"], [True, True], "judge")]


def test_automatic_labels_leave_the_judge_out(mixed):
    solution, agreed = mixed
    judged_only = SolutionFactory(steps=["p", "q"])
    label_steps(judged_only, "judge", {0: (None, 0.9, ""), 1: (None, 0.9, "")})
    automatic = rows("soft", labels="automatic")
    assert [row["id"] for row in automatic] == [solution.id, agreed.id]
    assert automatic[0]["k"] == [4, 1, 2, 0, 0] and automatic[0]["n"] == [4] * 5


@pytest.mark.parametrize("format", exporting.FORMATS)
def test_judge_and_rollout_labels_never_count_as_human_labels(mixed, format):
    solution, agreed = mixed
    annotate(solution, [1, 0, -1], labeler="x")
    annotate(agreed, [1, 1], labeler="y")
    with_machines = rows(format)
    AutoLabelRun.objects.all().delete()
    assert with_machines == rows(format) and with_machines


def test_formats_that_cannot_hold_judge_or_consensus_labels_say_so(mixed):
    with pytest.raises(ExportError, match="labels: processbench takes human labels only"):
        rows("processbench", labels="judge")
    with pytest.raises(ExportError, match="labels: prm800k takes human, automatic, both labels, not consensus"):
        rows("prm800k", labels="consensus")
    with pytest.raises(ExportError, match="labels: critique takes human, judge labels, not automatic"):
        rows("critique", labels="automatic")


@pytest.mark.parametrize("value, message", [
    ("rollouts,oracle", "consensus: unknown 'oracle'; expected two or more of human, rollouts, judge"),
    ("judge", "consensus: judge alone agrees with nothing"),
    ("judge,judge", "consensus: judge alone agrees with nothing"),
])
def test_a_bad_consensus_is_an_error_naming_the_option(tmp_path, value, message):
    with pytest.raises(CommandError, match=message):
        call_command("export_prm800k", str(tmp_path / "out.jsonl"), "--format", "soft", "--labels", "consensus",
                     "--consensus", value)
    assert not (tmp_path / "out.jsonl").exists()


def test_the_command_help_names_judge_and_consensus(capsys):
    with pytest.raises(SystemExit):
        call_command("export_prm800k", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "judge" in help_text and "consensus" in help_text and "--consensus" in help_text
    assert "openrlhf" in help_text and "critique" in help_text


def test_an_export_job_keeps_the_consensus_and_reports_its_counts(mixed, settings, tmp_path, client, admin_user):
    settings.EXPORTS_DIR = str(tmp_path)
    options = ExportOptions.from_dict({"labels": "consensus", "consensus": ["judge", "rollouts"]})
    job = exporting.create_export_job(format="trl", options=options)
    job = exporting.run_export_job(job_id=job.pk)
    assert job.options["consensus"] == ["judge", "rollouts"] and job.state == "succeeded"
    assert job.report["consensus"]["kept_bad"] == 1 and (job.done, job.total) == (2, 2)
    written = [json.loads(line) for line in open(job.path)]
    assert [row["labels"] for row in written] == [[True], [True, True]]
    client.force_login(admin_user)
    page = " ".join(client.get(f"/jobs/export/{job.pk}/").content.decode().split())
    assert ("Consensus of judge, rollouts:</strong> 6 steps seen (up to each solution's first agreed bad step), "
            "3 kept as good (every source said good), 1 kept as bad (every source said bad), 1 dropped: a source "
            "said nothing of the step, 1 dropped: the sources disagreed") in page.replace("&#x27;", "'")


def test_the_page_and_the_api_offer_judge_and_consensus_and_refuse_a_bad_consensus(mixed, client, admin_user):
    from rest_framework.test import APIClient

    client.force_login(admin_user)
    page = client.get("/exports/").content.decode()
    assert 'value="judge"' in page and 'value="consensus"' in page and 'name="consensus"' in page
    client.post("/exports/", {"format": "soft", "neutral_is_good": "1", "labels": "consensus",
                              "consensus": ["human", "judge"]})
    assert ExportJob.objects.get().options["consensus"] == ["human", "judge"]
    refused = client.post("/exports/", {"format": "soft", "neutral_is_good": "1", "labels": "consensus",
                                        "consensus": ["judge"]})
    assert refused.status_code == 200 and "judge alone agrees with nothing" in refused.content.decode()
    api = APIClient()
    api.force_authenticate(admin_user)
    created = api.post("/api/exports", {"format": "trl", "labels": "judge"}, format="json")
    assert created.status_code == 201 and created.json()["options"]["labels"] == "judge"
    refused = api.post("/api/exports", {"format": "trl", "labels": "consensus", "consensus": ["judge"]}, format="json")
    assert refused.status_code == 400 and "judge alone agrees with nothing" in refused.json()["consensus"][0]
    assert ExportJob.objects.count() == 2
