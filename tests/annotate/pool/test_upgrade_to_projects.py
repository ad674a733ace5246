"""An existing install upgrades to projects with nothing lost (annotate 0021, scoring 0013).

Driven with Django's MigrationExecutor, as the other migration tests are: the database is taken
back to the last state before projects (annotate 0020, scoring 0012), every table of both apps is
filled through that state's models, and the database is brought forward to the latest migrations.
Then every table holds as many rows as before, all of them in the project `default`; its settings
are row 1's labeling settings with the environment's campaign policies; role groups became
memberships; the current model became the default project's; and the PRM800K export is the same
bytes.

What "the same export" is measured against, twice (today's exporter cannot run on the old
tables: it selects by project):
- `upgrade_exports/`: the PRM800K and TRL files the exporter as it was before projects (commit
  133b797) wrote from exactly these rows (`populate`, run on that commit's schema). The files hold
  no database ids, so they are the same whatever ids a run gives the rows.
- In this run, before migrating: the PRM800K file built from the old tables by the line builder
  (`prm800k.line_for_annotation`, which every export line goes through and which reads attributes
  only) with the exporter's encoder, over the annotations the exporter selects (submitted, quality
  control left out, in id order).
After migrating, the whole exporter (`write_export`, its loader and the project's selection)
writes the default project's files, and each must be the same bytes.
"""
import datetime as dt
import json
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotate.models import Project
from annotate.pool import exporting, prm800k
from annotate.pool.exporting import ExportOptions

# Migrations run outside a test transaction.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXPECTED = Path(__file__).parent / "upgrade_exports"
BEFORE = [("annotate", "0020_reason_and_rating_choices"), ("scoring", "0012_unused_like_indexes")]
APPS = ("annotate", "scoring")
WHEN = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def migrate(targets):
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


def latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def back_to_latest():
    yield
    migrate(latest())  # the next tests need the whole schema, whatever this one left


def populate(apps) -> dict:
    """A row (or a few) in every table of both apps, as an install had them before projects."""
    get = apps.get_model
    User, Group = get("auth", "User"), get("auth", "Group")
    ann = User.objects.create(username="ann")
    rev = User.objects.create(username="rev")
    boss = User.objects.create(username="boss", is_staff=True, is_superuser=True)
    both = User.objects.create(username="both")
    for name, users in (("annotator", [ann, both]), ("reviewer", [rev, both]), ("admin", [boss])):
        Group.objects.create(name=name).user_set.add(*users)

    get("annotate", "LabelingConfig").objects.create(
        pk=1, stop_at_first_error=False, allow_human_completion=True, overlap_k=2, qc_rate=0.25,
        screening_required=False, screening_pass_accuracy=0.7, lease_seconds=321, idle_seconds=45,
        assistance="second_look", assistance_margin=0.3)

    problems, solutions = [], []
    for n in range(3):
        problem = get("annotate", "Problem").objects.create(
            statement=f"What is {n} + {n}?", ground_truth_answer=str(2 * n), ground_truth_solution=f"{n}+{n}",
            source="old", content_hash=f"p{n}")
        solution = get("annotate", "Solution").objects.create(
            problem=problem, final_answer=str(2 * n), is_correct=n != 1, source="old", generator="g",
            content_hash=f"s{n}", pre_generated_verifier_score=0.5 if n == 2 else None)
        for i, text in enumerate([f"{n} + {n} = {2 * n}.", f"# Answer\n\n{2 * n}"]):
            get("annotate", "Step").objects.create(solution=solution, index=i, text=text,
                                                   gold_rating=1 if n == 0 else None)
        get("annotate", "SampleLine").objects.create(solution=solution, file_digest="d" * 64, line_no=n + 1,
                                                     file_name="old.jsonl")
        problems.append(problem)
        solutions.append(solution)
    get("annotate", "Generation").objects.create(number=0, note="default order")
    get("annotate", "Generation").objects.create(number=1, model_version_name="v1")
    items = [get("annotate", "QueueItem").objects.create(solution=s, generation=1, slot=0, priority=1.0 - i,
                                                         score_at_selection=0.1 * i, status="done")
             for i, s in enumerate(solutions)]

    for i, (solution, user) in enumerate(zip(solutions, [ann, rev, both])):
        annotation = get("annotate", "Annotation").objects.create(
            solution=solution, annotator=user, labeler=user.username, status="submitted",
            finish_reason="found_error" if i == 1 else "solution", total_time_ms=1000 + i, generation=1,
            queue_item=items[i], timestamp=WHEN + dt.timedelta(minutes=i))
        for index, step in enumerate(solution.steps.order_by("index")):
            label = get("annotate", "StepLabel").objects.create(annotation=annotation, index=index,
                                                                chosen_completion=0, time_ms=10)
            get("annotate", "Completion").objects.create(step_label=label, index=0, text=step.text,
                                                         rating=-1 if i == 1 else 1, flagged=False)
    # An imported PRM800K label (no annotator), a quality-control one and one in progress.
    imported = get("annotate", "Annotation").objects.create(
        solution=solutions[0], labeler="prm800k-labeler", status="submitted", finish_reason="solution",
        total_time_ms=None, generation=7, timestamp=WHEN,
        question_extra={"timestamp": "2022-07-17T16:56:50.323252"})
    label = get("annotate", "StepLabel").objects.create(annotation=imported, index=0, chosen_completion=None,
                                                        human_completion={"text": "better", "rating": None})
    get("annotate", "Completion").objects.create(step_label=label, index=0, text="0 + 0 = 0.", rating=-1,
                                                 flagged=True, extra={"k": 1})
    get("annotate", "Annotation").objects.create(solution=solutions[1], annotator=ann, labeler="ann-gold",
                                                 status="submitted", is_quality_control=True, generation=1)
    get("annotate", "Annotation").objects.create(solution=solutions[2], annotator=ann, labeler="ann-draft")
    get("annotate", "RatingOverride").objects.create(step_label=label, previous_rating=-1, new_rating=1, reviewer=rev,
                                                     note="fine")
    get("annotate", "ScreeningResult").objects.create(annotator=ann, passed=True, items=3, step_accuracy=0.9)
    run = get("annotate", "AutoLabelRun").objects.create(method="math_shepherd", source="policy", params={"n": 4})
    get("annotate", "AutoStepLabel").objects.create(run=run, step=solutions[0].steps.first(), n_rollouts=4,
                                                    n_correct=3, soft=0.75)
    get("annotate", "ImportJob").objects.create(path="/x/old.jsonl", state="succeeded", created=3)
    get("annotate", "ExportJob").objects.create(format="prm800k", state="succeeded", lines=3)

    current = get("scoring", "ModelVersion").objects.create(name="v1", path="/m/v1", weights_sha256="1" * 64,
                                                            is_current=True)
    get("scoring", "ModelVersion").objects.create(name="v0", path="/m/v0", weights_sha256="0" * 64)
    job = get("scoring", "RescoreJob").objects.create(model_version=current, state="succeeded")
    get("scoring", "RescoreChunk").objects.create(job=job, index=0)
    for solution in solutions:
        get("scoring", "SolutionScore").objects.create(model_version=current, solution=solution, product=0.5,
                                                       min=0.5, last=0.5, mean=0.5)
        get("scoring", "StepScore").objects.create(model_version=current, step=solution.steps.first(), p=0.5)
    get("scoring", "TrainingRun").objects.create()
    generation_run = get("scoring", "GenerationRun").objects.create(prompt_template="Solve: {problem}")
    get("scoring", "GenerationChunk").objects.create(run=generation_run, index=0)
    get("scoring", "RolloutLabelJob").objects.create(run=run)
    return {"current": current.pk}


def counts(apps) -> dict[str, int]:
    return {f"{label}.{model.__name__}": model.objects.count()
            for label in (*APPS, "auth") for model in apps.get_app_config(label).get_models()}


def expected_prm800k(apps) -> bytes:
    """The PRM800K file, built from the old tables by the line builder with the exporter's encoder."""
    Annotation = apps.get_model("annotate", "Annotation")
    selected = (Annotation.objects.filter(status="submitted", is_quality_control=False).order_by("id")
                .select_related("solution__problem", "queue_item")
                .prefetch_related("solution__steps", "step_labels__completions"))
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    lines = []
    for annotation in selected:
        annotation.guideline_version = None  # no such column before projects: nothing was stamped
        lines.append(dumps(prm800k.line_for_annotation(annotation)) + "\n")
    return "".join(lines).encode()


def test_an_install_upgrades_to_one_default_project_with_nothing_lost(back_to_latest, settings, tmp_path):
    old = migrate(BEFORE)
    old.get_model("annotate", "LabelingConfig").objects.all().delete()  # row 1 is the install's, made below
    made = populate(old)
    before = counts(old)
    empty = [name for name, n in before.items() if n == 0 and not name.startswith("auth.")]
    assert not empty, f"every table of both apps has rows before migrating: {empty}"
    expected = expected_prm800k(old)
    assert expected.count(b"\n") == 4
    settings.STEPWISE_QUEUE_SIZE, settings.STEPWISE_QUEUE_PER_PROBLEM = 77, 5
    settings.STEPWISE_SELECTION_SHARES = {"random": 1.0}
    settings.STEPWISE_PROMOTION_MIN_GAIN, settings.STEPWISE_PROMOTION_MIN_SOLUTIONS = 0.02, 40
    settings.STEPWISE_PROMOTION_MIN_STEPS = 400

    new = migrate(latest())

    after = counts(new)
    assert {name: after.get(name) for name in before} == before
    default = new.get_model("annotate", "Project").objects.get()
    assert (default.slug, default.name) == ("default", "Default")
    for label in APPS:
        for model in new.get_app_config(label).get_models():
            if any(field.name == "project" for field in model._meta.concrete_fields):
                assert set(model.objects.values_list("project_id", flat=True)) <= {default.pk}, model.__name__
    config = new.get_model("annotate", "LabelingConfig").objects.get()
    assert config.project_id == default.pk
    assert (config.stop_at_first_error, config.allow_human_completion, config.overlap_k, config.qc_rate,
            config.screening_required, config.screening_pass_accuracy, config.lease_seconds, config.idle_seconds,
            config.assistance, config.assistance_margin) == (False, True, 2, 0.25, False, 0.7, 321, 45,
                                                             "second_look", 0.3)
    assert (config.queue_size, config.queue_per_problem, config.selection_shares, config.promotion_min_gain,
            config.promotion_min_solutions, config.promotion_min_steps) == (77, 5, {"random": 1.0}, 0.02, 40, 400)
    memberships = new.get_model("annotate", "Membership").objects.filter(project=default)
    assert dict(memberships.values_list("user__username", "role")) == {
        "ann": "annotator", "rev": "reviewer", "both": "reviewer", "boss": "admin"}
    current = new.get_model("scoring", "CurrentModel").objects.get()
    assert (current.project_id, current.model_version_id) == (default.pk, made["current"])

    default = Project.objects.get(slug="default")
    for format in ("prm800k", "trl"):
        out = tmp_path / f"{format}.jsonl"
        exporting.write_export(project=default, path=out, format=format, options=ExportOptions())
        assert out.read_bytes() == (EXPECTED / f"{format}.jsonl").read_bytes(), format
    assert (tmp_path / "prm800k.jsonl").read_bytes() == expected
