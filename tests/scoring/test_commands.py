"""The rescore command: names bad input, queues a job for the chosen version."""
import pytest
from django.core.management import CommandError, call_command

from scoring import registry
from scoring.models import RescoreJob
from scoring.tiny import build_tiny_prm


def test_rescore_without_any_model_says_how_to_get_one(db):
    with pytest.raises(CommandError, match="init_default_model"):
        call_command("rescore")


def test_rescore_with_an_unknown_model_lists_the_known_ones(db, tmp_path):
    registry.register_model_version(name="tiny-a", path=build_tiny_prm(tmp_path / "a"))
    with pytest.raises(CommandError, match="'nope': no such model version \\(known: tiny-a\\)"):
        call_command("rescore", "--model", "nope")


def test_rescore_queues_a_job_for_the_current_model(db, tmp_path, capsys):
    version = registry.register_model_version(name="tiny-b", path=build_tiny_prm(tmp_path / "b"), make_current=True)
    call_command("rescore", "--no-queue")
    job = RescoreJob.objects.get()
    assert job.model_version == version and job.rebuild_queue is False
    assert f"Rescore job {job.pk} queued for model tiny-b" in capsys.readouterr().out
