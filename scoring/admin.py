"""Admin for the model side, with a "rescore with this version" action."""
from django.contrib import admin, messages

from scoring.models import (
    CurrentModel,
    GenerationChunk,
    GenerationRun,
    JudgeLabelJob,
    ModelVersion,
    RescoreChunk,
    RescoreJob,
    RolloutLabelJob,
    SolutionScore,
    StepScore,
    TrainingRun,
)
from scoring.rescoring import rescore as scoring
from scoring.store import registry


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "status", "project", "parent", "created_at"]
    list_filter = ["kind", "status", "project"]
    search_fields = ["name", "path"]
    readonly_fields = ["weights_sha256", "config", "created_at"]
    actions = ["rescore_with_version", "make_current"]

    def get_readonly_fields(self, request, obj=None):
        # A saved version's folder stays the one its fingerprint was taken from.
        return self.readonly_fields + (["path"] if obj is not None else [])

    @admin.action(description="Rescore its project's pool with this version")
    def rescore_with_version(self, request, queryset):
        for version in queryset:
            if version.project is None:
                self.message_user(request, f"{version.name} belongs to no project: rescore from a project's "
                                           "models page or `manage.py rescore --project`.", messages.ERROR)
                continue
            try:
                job = scoring.start_rescore(model_version=version, project=version.project, created_by=request.user)
            except registry.ModelIntegrityError as error:
                self.message_user(request, str(error), messages.ERROR)
                continue
            self.message_user(request, f"Rescore job {job.pk} queued for {version.name}.", messages.SUCCESS)

    @admin.action(description="Make this the current version of its project")
    def make_current(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Choose exactly one version.", messages.ERROR)
            return
        version = queryset.get()
        if version.project is None:
            self.message_user(request, f"{version.name} belongs to no project: choose the project under "
                                       "Current models.", messages.ERROR)
            return
        registry.set_current_model(version, project=version.project)


@admin.register(CurrentModel)
class CurrentModelAdmin(admin.ModelAdmin):
    """Each project's current model; any version may be current in any project."""

    list_display = ["project", "model_version", "since"]
    list_select_related = ["project", "model_version"]
    autocomplete_fields = ["model_version"]


@admin.register(StepScore)
class StepScoreAdmin(admin.ModelAdmin):
    list_display = ["step", "model_version", "p", "mean", "sigma"]
    list_filter = ["model_version"]
    raw_id_fields = ["step"]
    list_select_related = ["step", "model_version"]


@admin.register(SolutionScore)
class SolutionScoreAdmin(admin.ModelAdmin):
    list_display = ["solution", "model_version", "product", "min", "last", "mean", "sigma"]
    list_filter = ["model_version"]
    raw_id_fields = ["solution"]
    list_select_related = ["solution", "model_version"]


class RescoreChunkInline(admin.TabularInline):
    model = RescoreChunk
    fields = readonly_fields = ("index", "state", "finished_at")
    extra = 0
    can_delete = False


@admin.register(RescoreJob)
class RescoreJobAdmin(admin.ModelAdmin):
    list_display = [
        "pk", "project", "model_version", "state", "done", "total", "chunks_done", "chunks_total", "generation",
        "created_at",
    ]
    list_filter = ["state", "project"]
    inlines = [RescoreChunkInline]


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "project", "state", "parent", "result", "n_labels", "created_at"]
    list_filter = ["state", "project"]


class GenerationChunkInline(admin.TabularInline):
    model = GenerationChunk
    extra = 0
    can_delete = False
    readonly_fields = ["index", "problem_ids", "state", "finished_at", "created", "duplicates", "skipped", "queued",
                       "prompt_tokens", "completion_tokens", "retries"]


@admin.register(GenerationRun)
class GenerationRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "state", "generator_name", "samples_per_problem", "done", "total", "created", "created_at"]
    list_filter = ["state"]
    readonly_fields = ["problem_ids", "generator_spec", "claimed_by", "heartbeat_at", "enqueued_at"]
    inlines = [GenerationChunkInline]

    def has_add_permission(self, request):
        return False  # runs start from their page or the command, which check them and send their task


@admin.register(GenerationChunk)
class GenerationChunkAdmin(admin.ModelAdmin):
    list_display = ["run", "index", "state", "created", "duplicates", "skipped", "finished_at"]
    list_filter = ["state"]
    list_select_related = ["run"]


@admin.register(RolloutLabelJob)
class RolloutLabelJobAdmin(admin.ModelAdmin):
    """Rollout labeling jobs (`label_rollouts`); their labels are in the run's AutoStepLabels."""

    list_display = ["pk", "run", "state", "done", "total", "skipped", "full_sweep_rollouts", "created_at"]
    list_filter = ["state", "run__method"]
    list_select_related = ["run"]
    readonly_fields = ["run", "generator_spec", "solution_ids", "full_sweep_rollouts", "skipped"]


@admin.register(JudgeLabelJob)
class JudgeLabelJobAdmin(admin.ModelAdmin):
    """Judge labeling jobs (`label_judge`); the answers are the run's JudgeAnswers, the verdicts its AutoStepLabels."""

    list_display = ["pk", "run", "state", "done", "total", "unparseable", "skipped", "created_at"]
    list_filter = ["state"]
    list_select_related = ["run"]
    readonly_fields = ["run", "generator_spec", "solution_ids", "unparseable", "skipped"]
