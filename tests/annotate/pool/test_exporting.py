"""Exports: PRM800K round trips, TRL / ProcessBench / soft-label shapes, filters, atomic files."""
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from annotate.models import Annotation, ExportJob, Project
from annotate.pool import exporting
from annotate.pool.exporting import ExportOptions
from jobs.states import JobState
from tests.annotations import BLIND, GCF_STEPS, PHASE1_LINE, PHASE2_LINE, annotate, import_lines
from tests.factories import SolutionFactory


def rows(format: str, **options) -> list[dict]:
    return list(exporting.iter_rows(project=Project.objects.sole(), format=format, options=ExportOptions(**options)))


@pytest.mark.django_db
def test_phase2_found_error_line_is_exported_as_the_same_json_object(tmp_path):
    import_lines(tmp_path, [PHASE2_LINE])
    out = tmp_path / "out.jsonl"
    exporting.write_export(project=Project.objects.sole(), path=out, format="prm800k", options=ExportOptions())
    assert [json.loads(line) for line in out.read_text().splitlines()] == [PHASE2_LINE]


@pytest.mark.django_db
def test_phase1_line_with_alternatives_and_a_human_completion_round_trips(tmp_path):
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    assert rows("prm800k") == [PHASE1_LINE, PHASE2_LINE]


@pytest.mark.django_db
def test_trl_rows_follow_the_chosen_path_up_to_the_first_error_as_booleans(tmp_path):
    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    *phase1, stopped, walked = rows("trl")
    # The step stopped at is a row of its own; the walked path before it is the last row.
    assert stopped == {"prompt": PHASE2_LINE["question"]["problem"], "completions": GCF_STEPS[:3],
                       "labels": [True, True, False], "assistance": BLIND}
    assert walked == {"prompt": PHASE2_LINE["question"]["problem"], "completions": GCF_STEPS[:2],
                      "labels": [True, True], "assistance": BLIND}
    # The human completion continues the path and counts as a good step.
    human = PHASE1_LINE["label"]["steps"][1]["human_completion"]["text"]
    assert phase1[-1]["completions"] == ["The denominator factors as $(x+3)(x-2)$.", human]
    assert phase1[-1]["labels"] == [True, True]
    for row in rows("trl"):
        assert list(row) == ["prompt", "completions", "labels", "assistance"]
        assert type(row["prompt"]) is str
        assert all(type(text) is str for text in row["completions"])
        assert all(type(label) is bool for label in row["labels"])


@pytest.mark.django_db
def test_trl_neutral_mapping_is_configurable(tmp_path):
    import_lines(tmp_path, [PHASE2_LINE])
    assert [row["labels"] for row in rows("trl", neutral_is_good=False)] == [[True, False, False], [True, False]]


@pytest.mark.django_db
def test_processbench_label_is_the_index_of_the_first_error_or_minus_one():
    wrong = SolutionFactory(steps=["a", "b", "c", "d"], is_correct=False, generator="gen-x", source="gsm8k")
    right = SolutionFactory(steps=["e", "f"], is_correct=True)
    annotate(wrong, [1, 0, -1])
    annotate(right, [1, 1])
    first, second = rows("processbench")
    assert first["steps"] == ["a", "b", "c", "d"]
    assert (first["label"], first["final_answer_correct"], first["generator"]) == (2, False, "gen-x")
    assert (second["label"], second["final_answer_correct"]) == (-1, True)
    assert list(first) == ["id", "generator", "problem", "steps", "final_answer_correct", "label", "assistance"]
    assert first["id"] != second["id"]


@pytest.mark.django_db
def test_soft_labels_count_k_good_of_n_annotators_per_step():
    solution = SolutionFactory(steps=["a", "b", "c"])
    annotate(solution, [1, 1, 1], labeler="x")
    annotate(solution, [1, 0, -1], labeler="y")
    annotate(solution, [1, -1], labeler="z")
    (row,) = rows("soft")
    assert row["k"] == [3, 2, 1] and row["n"] == [3, 3, 2]
    assert row["soft_labels"] == [1.0, 2 / 3, 0.5]
    (strict,) = rows("soft", neutral_is_good=False)
    assert strict["k"] == [3, 1, 1]
    annotate(SolutionFactory(steps=["p", "q"]), [0, 1], labeler="x")
    assert [r["k"] for r in rows("soft", neutral_is_good=False)] == [[3, 1, 1], [0, 1]]


@pytest.mark.django_db
def test_filters_select_generations_dates_quality_control_and_finish_reasons():
    old = timezone.now() - timedelta(days=30)
    a = annotate(SolutionFactory(), [1, 1, 1], generation=1, timestamp=old)
    b = annotate(SolutionFactory(), [1, -1], generation=2)
    c = annotate(SolutionFactory(), [1, 1, 1], generation=2, quality_control=True)
    annotate(SolutionFactory(), [1], generation=2, status=Annotation.Status.IN_PROGRESS)

    def labelers(**options):
        ids = [int(r["id"].rsplit("-", 1)[1]) for r in rows("processbench", **options)]
        return [Annotation.objects.get(solution_id=i).pk for i in ids]

    assert labelers() == [a.pk, b.pk]
    assert labelers(include_qc=True) == [a.pk, b.pk, c.pk]
    assert labelers(generations=(2,), include_qc=True) == [b.pk, c.pk]
    assert labelers(since=timezone.now() - timedelta(days=1)) == [b.pk]
    assert labelers(finish_reasons=("found_error",)) == [b.pk]


def test_bad_options_are_refused_naming_the_option():
    with pytest.raises(exporting.ExportError, match="finish_reasons"):
        ExportOptions.from_dict({"finish_reasons": ["done"]})
    with pytest.raises(exporting.ExportError, match="since"):
        ExportOptions.from_dict({"since": "last tuesday"})
    with pytest.raises(exporting.ExportError, match="format"):
        exporting.check_format("csv")


@pytest.mark.django_db
def test_a_file_being_written_is_never_visible_and_a_failed_export_leaves_the_old_file(tmp_path):
    for _ in range(3):
        annotate(SolutionFactory(), [1, 1, 1])
    out = tmp_path / "data.jsonl"
    out.write_text("previous export\n")
    seen = []

    def fail_midway(done: int) -> None:
        seen.append((done, out.read_text(), sorted(p.name for p in tmp_path.iterdir())))
        if done == 2:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        exporting.write_export(project=Project.objects.sole(),
                               path=out, format="trl", options=ExportOptions(), on_progress=fail_midway,
                               progress_every=1)
    # While writing, the destination still held the old file and the new one was a hidden .part.
    assert seen[0][1] == "previous export\n"
    assert any(name.startswith(".data.jsonl.") and name.endswith(".part") for name in seen[0][2])
    assert out.read_text() == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


@pytest.mark.django_db
def test_export_command_writes_the_chosen_format_and_filters(tmp_path):
    annotate(SolutionFactory(), [1, 1, 1], generation=1)
    annotate(SolutionFactory(), [1, -1], generation=2)
    out = tmp_path / "gen2.jsonl"
    call_command("export_prm800k", str(out), "--generation", "2", "--format", "trl")
    stopped, walked = [json.loads(line) for line in out.read_text().splitlines()]
    assert (stopped["labels"], walked["labels"]) == ([True, False], [True])


@pytest.mark.django_db
def test_export_command_refuses_a_bad_date_naming_the_option_and_writes_nothing(tmp_path):
    from django.core.management.base import CommandError

    out = tmp_path / "out.jsonl"
    with pytest.raises(CommandError, match="since: 'yesterday'"):
        call_command("export_prm800k", str(out), "--since", "yesterday")
    assert not out.exists()
    annotate(SolutionFactory(), [1, 1, 1], finish_reason="give_up")
    call_command("export_prm800k", str(out), "--since", "2020-01-01", "--finish-reason", "give_up")
    assert [json.loads(line)["label"]["finish_reason"] for line in out.read_text().splitlines()] == ["give_up"]


@pytest.mark.django_db
def test_export_job_writes_its_file_and_records_progress(settings, admin_user):
    for _ in range(5):
        annotate(SolutionFactory(), [1, 1, -1])
    job = ExportJob.objects.create(format="processbench", options=ExportOptions().to_dict(), created_by=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    assert (job.state, job.lines, job.done, job.total, job.percent) == (JobState.SUCCEEDED, 5, 5, 5, 100)
    assert job.progress_unit == "solutions" and job.skipped == {}
    path = exporting.finished_file(job)
    assert path.parent == Path(settings.EXPORTS_DIR)
    assert [json.loads(line)["label"] for line in path.read_text().splitlines()] == [2] * 5
    # Run again (a redelivered task): nothing changes.
    assert exporting.run_export_job(job_id=job.pk).finished_at == job.finished_at


@pytest.mark.django_db
def test_a_failed_export_job_is_not_run_again_on_redelivery(admin_user):
    annotate(SolutionFactory(), [1, 1, 1])
    job = ExportJob.objects.create(format="trl", options={"finish_reasons": ["done"]}, created_by=admin_user)
    with pytest.raises(exporting.ExportError, match="finish_reasons"):
        exporting.run_export_job(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.error.startswith("ExportError: finish_reasons")
    # Whatever changed since, a redelivered task leaves the failed job as it ended.
    ExportJob.objects.filter(pk=job.pk).update(options={})
    again = exporting.run_export_job(job_id=job.pk)
    assert (again.state, again.error, again.lines, again.path) == (JobState.FAILED, job.error, 0, "")
    assert again.finished_at == job.finished_at


@pytest.mark.django_db
def test_an_export_job_left_running_by_a_dead_attempt_is_run_again(admin_user):
    annotate(SolutionFactory(), [1, 1, 1])
    job = ExportJob.objects.create(format="trl", options={}, state=JobState.RUNNING, done=7, created_by=admin_user)
    job = exporting.run_export_job(job_id=job.pk)
    assert (job.state, job.lines, job.done) == (JobState.SUCCEEDED, 1, 1)


@pytest.mark.django_db
def test_export_with_prefetching_makes_a_fixed_number_of_queries(django_assert_max_num_queries):
    for _ in range(30):
        annotate(SolutionFactory(), [1, 0, -1])
    project = Project.objects.sole()
    with django_assert_max_num_queries(8):
        assert len(list(exporting.iter_rows(project=project, format="prm800k", options=ExportOptions()))) == 30


@pytest.mark.django_db
def test_chunk_records_give_the_same_lines_as_model_instances(tmp_path):
    """The fast loader feeds prm800k.line_for_annotation what a prefetched instance would."""
    from annotate.models import QueueItem
    from annotate.pool import prm800k

    import_lines(tmp_path, [PHASE1_LINE, PHASE2_LINE])
    solution = SolutionFactory(pre_generated_verifier_score=0.9)
    item = QueueItem.objects.create(solution=solution, generation=4, score_at_selection=0.42)
    local = annotate(solution, [1, 0, -1], generation=4)
    Annotation.objects.filter(pk=local.pk).update(queue_item=item)
    instances = Annotation.objects.order_by("id").select_related("solution__problem", "queue_item")
    instances = instances.prefetch_related("solution__steps", "step_labels__completions")
    expected = [prm800k.line_for_annotation(a) for a in instances]
    assert rows("prm800k") == expected
    # A locally labeled item exports the score it had when selection served it.
    assert expected[-1]["question"]["pre_generated_verifier_score"] == 0.42


@pytest.mark.django_db
@pytest.mark.slow
def test_export_memory_does_not_grow_with_the_number_of_lines():
    import tracemalloc

    from annotate.models import Problem
    from bench.commands.bench_export import BENCH_GENERATION, SOURCE, Command

    def peak_bytes(n: int) -> int:
        Command().create_batch(range(n), 3)
        options = ExportOptions(generations=(BENCH_GENERATION,))
        tracemalloc.start()
        lines = sum(1 for _ in exporting.iter_jsonl(project=Project.objects.sole(),
                                                    format="prm800k", options=options, chunk_size=100))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert lines == n
        Problem.objects.filter(source=SOURCE).delete()
        return peak

    small, large = peak_bytes(200), peak_bytes(1600)
    assert large < 1.5 * small, (small, large)


@pytest.mark.django_db
def test_an_unrated_step_ends_the_labeled_path_before_it():
    from annotate.models import Completion

    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 1, 1])
    Completion.objects.filter(step_label__annotation=annotation, step_label__index=1).update(rating=None)
    (row,) = rows("trl")
    assert row["completions"] == ["a"] and row["labels"] == [True]
    # ProcessBench cannot say "all steps correct" of a solution with an unrated step.
    assert rows("processbench") == []


@pytest.mark.django_db
def test_a_filtered_chunk_carries_only_its_own_annotations_labels_and_steps():
    # Interleaved generations: a chunk of generation 1 spans generation 2's ids, whose labels,
    # completions and steps must not leak into it, whether read by range or by id list.
    made = [annotate(SolutionFactory(steps=[f"s{i}a", f"s{i}b"]), [1, -1 if i % 2 else 1], generation=1 + i % 2)
            for i in range(9)]
    for chunk_size in (2, 3, 100):
        lines = list(exporting.iter_rows(project=Project.objects.sole(),
                                         format="prm800k", options=ExportOptions(generations=(1,)),
                                         chunk_size=chunk_size))
        wanted = [a for a in made if a.generation == 1]
        assert len(lines) == len(wanted)
        for line, annotation in zip(lines, wanted):
            texts = [s.text for s in annotation.solution.steps.order_by("index")]
            assert line["question"]["pre_generated_steps"] == texts
            assert [s["completions"][0]["text"] for s in line["label"]["steps"]] == texts


def test_ids_close_together_are_selected_by_range_and_spread_ids_by_list():
    from annotate.pool.exporting import loading

    assert "__gte" in str(loading._among("id", {5, 6, 8}))
    assert "__in" in str(loading._among("id", {5, 600, 9000}))


@pytest.mark.django_db
def test_a_job_resumed_after_a_dead_attempt_starts_its_progress_afresh():
    job = ExportJob.objects.create(format="trl", state=JobState.RUNNING, done=7, total=9)
    assert job.start(done=0) is True
    job.refresh_from_db()
    assert (job.state, job.done) == (JobState.RUNNING, 0)


def test_an_export_refuses_a_generation_number_no_column_can_hold():
    from annotate.pool.exporting.options import ExportError, ExportOptions

    with pytest.raises(ExportError, match="generations: each must be between 0 and"):
        ExportOptions.from_dict({"generations": ["9223372036854775808"]})
    assert ExportOptions.from_dict({"generations": ["3"]}).generations == (3,)
