"""The model commands: one way to name a version (`--model NAME`, else the current one), one error
for a name no version has and one for no current version; rescore queues a job for the chosen one."""
import json

import pytest
from django.core.management import CommandError, call_command

import bench
from bench.tiny import build_tiny_prm
from scoring.models import RescoreJob
from scoring.store import registry

# Every command that scores with a registered version, with the arguments it needs besides --model.
MODEL_COMMANDS = {
    "rescore": lambda tmp_path: ["rescore", "--no-queue"],
    "eval_prm": lambda tmp_path: ["eval_prm"],
    "search": lambda tmp_path: ["search", "What is 2 + 3?", "--max-tokens", "8"],
    "eval_search": lambda tmp_path: ["eval_search", "--data", str(gsm8k_folder(tmp_path)), "--problems", "1"],
}


def gsm8k_folder(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "answer": "#### 5"}))
    return tmp_path


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_model_command_without_any_model_says_how_to_get_one(db, tmp_path, command):
    with pytest.raises(CommandError) as refused:
        call_command(*MODEL_COMMANDS[command](tmp_path))
    assert str(refused.value) == "no current model version: run `manage.py init_default_model` or pass --model"


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
    assert f"Rescore job {job.pk} queued for model tiny-b" in capsys.readouterr().out
