"""A project's life: its settings changed with a record of who changed what, a new guideline
version, and deletion, which is refused while the project holds labels."""
from __future__ import annotations

from django.db import transaction
from django.db.models import ProtectedError

from annotate.labeling import quality
from annotate.models import (
    Annotation,
    AutoLabelRun,
    ExportJob,
    Generation,
    ImportJob,
    LabelingConfig,
    Membership,
    Problem,
    Project,
    QueueItem,
    ScreeningResult,
    SettingsChange,
    Solution,
)

# The project's own fields its settings page edits (the rest are LabelingConfig's).
PROJECT_FIELDS = ("name", "description", "guideline")


class ProjectInUse(Exception):
    """The project holds labels: deleting it would lose them."""


def change_settings(*, project: Project, user, values: dict) -> list[SettingsChange]:
    """Apply `values` (field -> new value, of the project or its LabelingConfig, already validated) and
    record each change. A changed guideline is a new guideline version, stamped on the annotations
    begun from now on; with `rescreen_on_guideline_change` every annotator takes the screening set again."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        config = LabelingConfig.of(project)
        changes = [*_apply(project, user, {k: v for k, v in values.items() if k in PROJECT_FIELDS}),
                   *_apply(config, user, {k: v for k, v in values.items() if k not in PROJECT_FIELDS}, project)]
        if any(change.field == "guideline" for change in changes):
            project.guideline_version += 1
            changes.append(_record(project, user, "guideline_version", project.guideline_version - 1,
                                   project.guideline_version))
            if config.rescreen_on_guideline_change:
                rescreen(project)
        project.save()
        config.save()
    return changes


def _apply(target, user, values: dict, project: Project | None = None) -> list[SettingsChange]:
    changes = []
    for field, new in values.items():
        old = getattr(target, field)
        if old != new:
            setattr(target, field, new)
            changes.append(_record(project or target, user, field, old, new))
    return changes


def _record(project: Project, user, field: str, old, new) -> SettingsChange:
    return SettingsChange.objects.create(project=project, user=user, field=field, old_value=str(old),
                                         new_value=str(new))


def rescreen(project: Project) -> int:
    """Every annotator of the project takes its screening set again; returns how many had a decision."""
    annotators = ScreeningResult.objects.filter(project=project).values_list("annotator_id", flat=True)
    people = list(Membership.objects.filter(project=project, user_id__in=list(annotators)).select_related("user"))
    for membership in people:
        quality.reset_screening(annotator=membership.user, project=project)
    return len(people)


def delete(project: Project) -> None:
    """Delete a project with its pool, queue and jobs; refused (ProjectInUse) while it holds labels,
    or model-side rows (training runs, rescores) that its admins should look at first."""
    labels = Annotation.objects.filter(project=project).count()
    if labels:
        raise ProjectInUse(f"project {project.slug!r} holds {labels} annotations: export them and delete those first")
    try:
        with transaction.atomic():
            # Owned rows protect their project, so none is deleted from under them by accident.
            for model in (QueueItem, Solution, Problem, Generation, ImportJob, ExportJob, AutoLabelRun,
                          ScreeningResult):
                model.objects.filter(project=project).delete()
            project.delete()
    except ProtectedError as error:
        kinds = sorted({str(type(row)._meta.verbose_name_plural) for row in error.protected_objects})
        raise ProjectInUse(f"project {project.slug!r} still has {', '.join(kinds)}") from None
