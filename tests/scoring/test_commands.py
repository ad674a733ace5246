"""The model commands: one way to name a project (`--project SLUG`, else the only one) and a version
(`--model NAME`, else the project's current one), one error for a name no version has and one for no
current version; rescore queues a job for the chosen one in the project."""
import json

import pytest
from django.core.management import CommandError, call_command
from django_celery_beat.models import PeriodicTask

import bench
from annotate.models import Project
from bench.tiny import build_tiny_prm
from scoring.learning import retraining
from scoring.models import RescoreJob
from scoring.store import registry
from tests.scoring.projects import two_projects

# Every command that scores with a registered version, with the arguments it needs besides --model.
MODEL_COMMANDS = {
    "rescore": lambda tmp_path: ["rescore", "--no-queue"],
    "eval_prm": lambda tmp_path: ["eval_prm"],
    "search": lambda tmp_path: ["search", "What is 2 + 3?", "--max-tokens", "8"],
    "eval_search": lambda tmp_path: ["eval_search", "--data", str(gsm8k_folder(tmp_path)), "--problems", "1"],
}


def gsm8k_folder(tmp_path):
    (tmp_path / "gsm8k").mkdir(exist_ok=True)
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "answer": "#### 5"}))
    return tmp_path


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_model_command_without_any_model_says_how_to_get_one(db, tmp_path, command):
    with pytest.raises(CommandError) as refused:
        call_command(*MODEL_COMMANDS[command](tmp_path))
    assert str(refused.value) == ("no current model version in default: run `manage.py init_default_model` "
                                  "or pass --model")


@pytest.mark.parametrize("command", [*MODEL_COMMANDS, "bench_scoring"])
def test_a_model_command_with_an_unknown_model_lists_the_known_ones(db, tmp_path, command):
    registry.register_model_version(name="tiny-a", path=build_tiny_prm(tmp_path / "a"), make_current=True)
    # bench_scoring is a benchmark (bench/), run through bench.call, and names versions the same way.
    run = call_command if command in MODEL_COMMANDS else bench.call
    arguments = MODEL_COMMANDS[command](tmp_path) if command in MODEL_COMMANDS else [command]
    with pytest.raises(CommandError) as refused:
        run(*arguments, "--model", "nope")
    assert str(refused.value) == "--model 'nope': no such model version (known: tiny-a)"


def test_export_model_names_an_unknown_version_by_its_argument(db, tmp_path):
    registry.register_model_version(name="tiny-a", path=build_tiny_prm(tmp_path / "a"))
    with pytest.raises(CommandError) as refused:
        call_command("export_model", "nope", str(tmp_path / "out"))
    assert str(refused.value) == "VERSION 'nope': no such model version (known: tiny-a)"
    assert not (tmp_path / "out").exists()


def test_rescore_queues_a_job_for_the_current_model(db, tmp_path, capsys):
    version = registry.register_model_version(name="tiny-b", path=build_tiny_prm(tmp_path / "b"), make_current=True)
    call_command("rescore", "--no-queue")
    job = RescoreJob.objects.get()
    assert job.model_version == version and job.rebuild_queue is False
    assert job.project == Project.objects.sole()
    assert f"Rescore job {job.pk} of default queued for model tiny-b" in capsys.readouterr().out


# Every command that works in a project, with the arguments it needs besides --project.
PROJECT_COMMANDS = {
    **MODEL_COMMANDS,
    "train_prm": lambda tmp_path: ["train_prm"],
    "retrain_schedule": lambda tmp_path: ["retrain_schedule"],
    "generate_solutions": lambda tmp_path: ["generate_solutions", "--problem-ids", "1"],
    "label_rollouts": lambda tmp_path: ["label_rollouts"],
}


@pytest.mark.parametrize("command", PROJECT_COMMANDS)
def test_with_several_projects_a_command_without_project_names_the_choices(db, tmp_path, command):
    two_projects()
    with pytest.raises(CommandError) as refused:
        call_command(*PROJECT_COMMANDS[command](tmp_path))
    assert str(refused.value) == "--project: several projects exist; name one of: default, gsm8k, math"
    with pytest.raises(CommandError) as refused:
        call_command(*PROJECT_COMMANDS[command](tmp_path), "--project", "mat")
    assert str(refused.value) == "--project: no project 'mat'; the projects are: default, gsm8k, math"


def test_rescore_works_in_the_named_project_with_its_current_model(db, tmp_path, capsys):
    gsm8k, math = two_projects()
    ours = registry.register_model_version(name="ours", path=build_tiny_prm(tmp_path / "a"), project=gsm8k,
                                           make_current=True)
    call_command("rescore", "--project", "gsm8k", "--no-queue")
    assert RescoreJob.objects.get().project == gsm8k and RescoreJob.objects.get().model_version == ours
    with pytest.raises(CommandError, match="no current model version in math"):
        call_command("rescore", "--project", "math")


def test_rescore_make_current_promotes_another_projects_version_by_hand(db, tmp_path, capsys):
    gsm8k, math = two_projects()
    ours = registry.register_model_version(name="ours", path=build_tiny_prm(tmp_path / "a"), project=gsm8k,
                                           make_current=True)
    call_command("rescore", "--project", "math", "--model", "ours", "--make-current", "--no-queue")
    assert registry.current_model(math) == registry.current_model(gsm8k) == ours
    assert RescoreJob.objects.get().project == math
    assert "of math queued for model ours (now its current model)" in capsys.readouterr().out


def test_retrain_schedule_makes_the_projects_own_schedule(db, capsys):
    gsm8k, _ = two_projects()
    call_command("retrain_schedule", "--project", "gsm8k", "--every-minutes", "5", "--min-new-labels", "7")
    task = PeriodicTask.objects.get(name=retraining.schedule_name(gsm8k))
    assert json.loads(task.kwargs) == {"project_id": gsm8k.pk, "min_new_labels": 7}
    assert capsys.readouterr().out.startswith("Retraining gsm8k: checked every 5 minutes, runs once 7 new labels exist")
