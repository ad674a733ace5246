"""Automatic labels in exports, only when asked: soft K/N from rollouts and imports, TRL rows with
Math-Shepherd's hard labels, PRM800K's `auto_labels` extra; human rows stay exactly as they were."""
import json

import pytest
from django.core.management import CommandError, call_command

from annotate.models import AutoLabelRun, AutoStepLabel, Project, Step
from annotate.pool import exporting, importing
from annotate.pool.exporting import ExportOptions
from tests.annotate.pool.test_import_prm_datasets import DUCK_STEPS, DUCKS, shepherd, write
from tests.annotations import PHASE2_LINE, annotate, import_lines
from tests.factories import SolutionFactory

pytestmark = pytest.mark.django_db


def rows(format: str, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format=format, options=ExportOptions(**options)))


@pytest.fixture
def rolled_out():
    """A human-labeled solution that also has rollout labels: K of N completions per step reached the answer."""
    solution = SolutionFactory(steps=["a", "b", "c"])
    annotate(solution, [1, 0, -1], labeler="x")
    run = AutoLabelRun.objects.create(method="math_shepherd", source="policy-7b", params={"n": 4})
    for step, k in zip(solution.steps.order_by("index"), [4, 1, 0], strict=True):
        AutoStepLabel.objects.create(run=run, step=step, n_rollouts=4, n_correct=k, soft=k / 4)
    return solution


def test_the_default_export_is_todays_human_export(rolled_out, tmp_path):
    human = {"soft": rows("soft"), "trl": rows("trl")}
    assert human["soft"] == [{"id": rolled_out.id, "problem": rolled_out.problem.statement, "steps": ["a", "b", "c"],
                              "k": [1, 1, 0], "n": [1, 1, 1], "soft_labels": [1.0, 1.0, 0.0], "annotations": 1,
                              "assistance": {"mode": "blind", "second_look": False}}]
    assert all(list(row) == ["prompt", "completions", "labels", "assistance"] for row in human["trl"])
    assert rows("soft", labels="human") == human["soft"] and rows("trl", labels="human") == human["trl"]


def test_automatic_soft_labels_are_k_of_n_pooled_over_runs_and_imports(rolled_out, tmp_path):
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [shepherd(DUCKS, DUCK_STEPS, "++-")]))
    rollouts, ducks = rows("soft", labels="automatic")
    assert (rollouts["k"], rollouts["n"], rollouts["soft_labels"]) == ([4, 1, 0], [4, 4, 4], [1.0, 0.25, 0.0])
    # An imported verdict has no rollout counts: one vote, 1 of 1 or 0 of 1.
    assert (ducks["steps"], ducks["k"], ducks["n"]) == (DUCK_STEPS, [1, 1, 0], [1, 1, 1])
    assert {rollouts["label_source"], ducks["label_source"]} == {"automatic"} and ducks["annotations"] == 0
    # A second run on the same steps pools with the first, never with the human labels.
    run = AutoLabelRun.objects.create(method="omegaprm", source="policy-7b")
    AutoStepLabel.objects.create(run=run, step=rolled_out.steps.get(index=1), n_rollouts=4, n_correct=3, soft=0.75)
    assert rows("soft", labels="automatic")[0]["k"][1] == 4 and rows("soft", labels="automatic")[0]["n"][1] == 8


def test_both_gives_the_human_rows_then_the_automatic_ones_each_saying_which(rolled_out):
    human = rows("trl")
    both = rows("trl", labels="both")
    assert both[:len(human)] == [{**row, "label_source": "human"} for row in human]
    # Math-Shepherd's hard label: good when some rollout from the step reached the answer.
    assert both[len(human):] == [{"prompt": rolled_out.problem.statement, "completions": ["a", "b", "c"],
                                  "labels": [True, True, False], "assistance": None, "label_source": "automatic"}]
    soft = rows("soft", labels="both")
    assert [row["label_source"] for row in soft] == ["human", "automatic"]


def test_processbench_gold_labels_export_as_trl_rows_up_to_the_first_unlabeled_step(tmp_path):
    line = {"id": "math-3", "generator": "Qwen2-7B-Instruct", "problem": "What is 3 * (2 + 5)?",
            "steps": ["2 + 5 = 7.", "3 * 7 = 24.", "So \\boxed{24}."], "final_answer_correct": False, "label": 1}
    importing.import_pool(project=Project.objects.sole(), path=write(tmp_path, [line]), format="processbench")
    assert rows("trl", labels="automatic") == [{"prompt": line["problem"], "completions": line["steps"][:2],
                                                "labels": [True, False], "assistance": None,
                                                "label_source": "automatic"}]


def test_prm800k_lines_gain_auto_labels_per_step_and_nothing_else(tmp_path):
    import_lines(tmp_path, [PHASE2_LINE])
    step = Step.objects.get(index=1)
    run = AutoLabelRun.objects.create(method="math_shepherd", source="policy-7b")
    AutoStepLabel.objects.create(run=run, step=step, n_rollouts=8, n_correct=6, soft=0.75)
    (line,) = rows("prm800k", labels="both")
    assert [s.pop("auto_labels") for s in line["label"]["steps"]] == [
        [], [{"source": "policy-7b", "method": "math_shepherd", "kind": "automatic", "n_rollouts": 8,
              "n_correct": 6, "soft": 0.75}], []]
    assert line == PHASE2_LINE  # What a PRM800K reader reads is unchanged.
    assert rows("prm800k") == [PHASE2_LINE]


def test_the_command_writes_automatic_labels_in_every_container_and_refuses_processbench(rolled_out, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    out = tmp_path / "both.jsonl"
    call_command("export_prm800k", str(out), "--format", "trl", "--labels", "both")
    expected = [json.loads(line) for line in out.read_text().splitlines()]
    call_command("export_prm800k", str(tmp_path / "pq"), "--format", "trl", "--labels", "both",
                 "--container", "parquet")
    table = datasets.load_dataset("parquet", data_files=str(tmp_path / "pq" / "data" / "train.parquet"),
                                  split="train", cache_dir=str(tmp_path / "cache"))
    assert table.to_list() == expected and [row["label_source"] for row in expected] == ["human", "human", "automatic"]
    card = (tmp_path / "pq" / "README.md").read_text()
    assert "**Label source**: both" in card and "Automatic rows:" in card and "| `label_source` |" in card
    with pytest.raises(CommandError, match="labels: processbench takes human labels only"):
        call_command("export_prm800k", str(tmp_path / "pb.jsonl"), "--format", "processbench", "--labels", "both")
    assert not (tmp_path / "pb.jsonl").exists()
