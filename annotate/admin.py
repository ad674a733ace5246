"""Django admin for every model of the labeling side: search, filters, inlines.

The pool runs to hundreds of thousands of rows, so foreign keys are raw ids (no giant
<select>), lists select their related rows, and exact counts are skipped on big tables.
"""
from typing import ClassVar

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from annotate.models import (
    Annotation,
    AutoLabelRun,
    AutoStepLabel,
    Completion,
    ExportJob,
    Generation,
    ImportJob,
    JudgeAnswer,
    LabelingConfig,
    Membership,
    Problem,
    Project,
    QueueItem,
    RatingOverride,
    SampleLine,
    ScreeningResult,
    SettingsChange,
    Solution,
    Step,
    StepLabel,
)
from steps.answers import strip_calculator_annotations


def _shortened(field: str):
    """A list column with the first 100 characters of a long text field."""

    @admin.display(description=field)
    def column(self, obj) -> str:
        return getattr(obj, field)[:100]

    return column


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    fields = ("index", "text", "gold_rating")
    ordering = ("index",)


class SolutionInline(admin.TabularInline):
    model = Solution
    extra = 0
    fields = ("final_answer", "is_correct", "is_reference", "source", "generator")
    readonly_fields = fields
    show_change_link = True
    can_delete = False
    max_num = 0  # solutions are made by imports, not typed in here


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("id", "short_statement", "ground_truth_answer", "source", "split", "created_at")
    list_filter = ("source", "split")
    search_fields = ("statement", "ground_truth_answer", "=content_hash")
    readonly_fields = ("content_hash", "created_at")
    inlines = [SolutionInline]
    show_full_result_count = False
    short_statement = _shortened("statement")


@admin.register(Solution)
class SolutionAdmin(admin.ModelAdmin):
    list_display = ("id", "problem_id", "final_answer", "is_correct", "is_reference", "is_gold", "source",
                    "generator", "sample_count", "pre_generated_verifier_score", "created_at")
    list_filter = ("is_correct", "is_reference", "is_gold", "source", "generator")
    search_fields = ("=id", "problem__statement", "final_answer", "=content_hash")
    raw_id_fields = ("problem",)
    readonly_fields = ("content_hash", "created_at", "steps_as_displayed")
    inlines = [StepInline]
    show_full_result_count = False

    @admin.display(description="steps as annotators see them")
    def steps_as_displayed(self, solution: Solution) -> str:
        texts = ((strip_calculator_annotations(step.text),) for step in solution.steps.all())
        items = format_html_join("", "<li>{}</li>", texts)
        return format_html("<ol>{}</ol>", items)


@admin.register(SampleLine)
class SampleLineAdmin(admin.ModelAdmin):
    """Where each sample of a solution came from; written by imports only, so read-only here."""

    list_display = ("id", "solution_id", "file_name", "line_no", "created_at")
    search_fields = ("=solution__id", "file_name", "=file_digest")
    raw_id_fields = ("solution",)
    readonly_fields = ("solution", "file_digest", "line_no", "file_name", "created_at")
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(AutoLabelRun)
class AutoLabelRunAdmin(admin.ModelAdmin):
    """Machine labeling passes with their provenance; rollouts, imports and judges write them."""

    list_display = ("id", "method", "source", "rollouts", "tokens", "created_at")
    list_filter = ("method",)
    search_fields = ("source",)
    readonly_fields = ("method", "source", "params", "rollouts", "tokens", "created_at")

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(AutoStepLabel)
class AutoStepLabelAdmin(admin.ModelAdmin):
    list_display = ("id", "run_id", "step_id", "n_correct", "n_rollouts", "soft")
    list_filter = ("run__method",)
    raw_id_fields = ("run", "step")
    readonly_fields = ("run", "step", "n_rollouts", "n_correct", "soft", "critique")
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(JudgeAnswer)
class JudgeAnswerAdmin(admin.ModelAdmin):
    """A judge's raw answer per solution, parsed or not: where an unparseable one can be read."""

    list_display = ("id", "run_id", "solution_id", "parsed", "error", "completion_tokens", "created_at")
    list_filter = ("parsed",)
    raw_id_fields = ("run", "solution")
    readonly_fields = ("run", "solution", "text", "parsed", "error", "prompt_tokens", "completion_tokens", "created_at")
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ("id", "solution_id", "index", "short_text", "gold_rating")
    list_filter = ("gold_rating",)
    search_fields = ("=solution__id", "text")
    raw_id_fields = ("solution",)
    show_full_result_count = False
    short_text = _shortened("text")


class StepLabelInline(admin.TabularInline):
    model = StepLabel
    extra = 0
    fields = ("index", "chosen_completion", "human_completion", "time_ms", "ratings")
    readonly_fields = ("ratings",)
    show_change_link = True
    ordering = ("index",)

    @admin.display(description="ratings of completions")
    def ratings(self, step_label: StepLabel) -> str:
        return ", ".join(str(c.rating) for c in step_label.completions.all())

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("completions")


@admin.register(Annotation)
class AnnotationAdmin(admin.ModelAdmin):
    list_display = ("id", "solution_id", "labeler", "annotator", "status", "finish_reason", "generation",
                    "is_quality_control", "is_initial_screening", "total_time_ms", "timestamp")
    list_filter = ("status", "finish_reason", "generation", "is_quality_control", "is_initial_screening")
    search_fields = ("=id", "labeler", "annotator__username", "=solution__id")
    list_select_related = ("annotator",)
    raw_id_fields = ("solution", "annotator", "queue_item")
    readonly_fields = ("created_at", "updated_at")
    date_hierarchy = "created_at"
    inlines = [StepLabelInline]
    show_full_result_count = False


@admin.register(ScreeningResult)
class ScreeningResultAdmin(admin.ModelAdmin):
    """Decisions are made by the screening gate, never typed in. Deleting one has it made again
    from the annotator's screening labels against the set and its gold as they are now (a
    regrade); "let retake" on /quality/ also removes those labels, so the set is taken again."""

    list_display = ("annotator", "passed", "step_accuracy", "items", "decided_at")
    list_filter = ("passed",)
    search_fields = ("annotator__username",)
    list_select_related = ("annotator",)
    readonly_fields = ("annotator", "passed", "step_accuracy", "items", "decided_at")

    def has_add_permission(self, request):
        return False


class CompletionInline(admin.TabularInline):
    model = Completion
    extra = 0
    fields = ("index", "text", "rating", "flagged", "extra")
    ordering = ("index",)


@admin.register(StepLabel)
class StepLabelAdmin(admin.ModelAdmin):
    list_display = ("id", "annotation_id", "index", "chosen_completion", "time_ms")
    search_fields = ("=annotation__id", "annotation__labeler")
    raw_id_fields = ("annotation",)
    inlines = [CompletionInline]
    show_full_result_count = False


@admin.register(Completion)
class CompletionAdmin(admin.ModelAdmin):
    list_display = ("id", "step_label_id", "index", "short_text", "rating", "flagged")
    list_filter = ("rating", "flagged")
    search_fields = ("text", "=step_label__annotation__id")
    raw_id_fields = ("step_label",)
    show_full_result_count = False
    short_text = _shortened("text")


@admin.register(RatingOverride)
class RatingOverrideAdmin(admin.ModelAdmin):
    list_display = ("id", "completion_id", "reviewer", "previous_rating", "new_rating", "created_at")
    list_filter = ("new_rating",)
    search_fields = ("note", "reviewer__username", "=completion__id")
    list_select_related = ("reviewer",)
    raw_id_fields = ("step_label", "completion", "reviewer")


@admin.register(Generation)
class GenerationAdmin(admin.ModelAdmin):
    list_display = ("number", "model_version_name", "started_at")
    search_fields = ("model_version_name", "note")


@admin.register(QueueItem)
class QueueItemAdmin(admin.ModelAdmin):
    list_display = ("id", "solution_id", "generation", "slot", "status", "priority", "reason",
                    "score_at_selection", "is_quality_control", "is_initial_screening", "leased_to",
                    "lease_expires_at")
    list_filter = ("status", "generation", "reason", "is_quality_control", "is_initial_screening")
    search_fields = ("=solution__id", "reason", "model_version_name", "leased_to__username")
    list_select_related = ("leased_to",)
    raw_id_fields = ("solution", "leased_to")
    show_full_result_count = False


class JobAdmin(admin.ModelAdmin):
    """Jobs are made by the app's pages, API and commands; here they are read and deleted.

    Their file paths are never editable, and no job is added here: a path typed into a
    succeeded export would be served by its download link (an export path of /etc/passwd was once served that way).
    """

    # (Typed as any length: the job admins below extend them.)
    list_filter: ClassVar[tuple[str, ...]] = ("state",)
    list_select_related = ("created_by",)
    raw_id_fields = ("created_by",)
    readonly_fields: ClassVar[tuple[str, ...]] = ("created_at", "finished_at", "path")

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ImportJob)
class ImportJobAdmin(JobAdmin):
    list_display = ("id", "original_name", "format", "state", "done", "total", "created", "duplicates", "errors",
                    "created_by", "created_at", "page")
    list_filter = ("state", "format", "atomic")
    search_fields = ("original_name", "source", "path")
    readonly_fields = JobAdmin.readonly_fields + ("report_path",)

    @admin.display(description="progress page")
    def page(self, job: ImportJob) -> str:
        return format_html('<a href="{}">open</a>', reverse("annotate:import-detail", args=[job.pk]))


@admin.register(ExportJob)
class ExportJobAdmin(JobAdmin):
    list_display = ("id", "format", "state", "done", "total", "lines", "created_by", "created_at")
    list_filter = ("state", "format")
    search_fields = ("path",)


@admin.register(LabelingConfig)
class LabelingConfigAdmin(admin.ModelAdmin):
    """Read here; changed on each project's settings page, which keeps a record of every change."""

    list_display = ("__str__", "stop_at_first_error", "overlap_k", "qc_rate", "screening_required")

    def has_add_permission(self, request) -> bool:
        return False  # one row per project, made with it (LabelingConfig.of)

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "guideline_version", "created_at")
    search_fields = ("name", "slug")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # annotate.labeling.projects.delete, which refuses while the project holds labels


@admin.register(SettingsChange)
class SettingsChangeAdmin(admin.ModelAdmin):
    """The record of a project's settings changes: read only."""

    list_display = ("changed_at", "project", "user", "field", "old_value", "new_value")
    list_filter = ("project", "field")
    search_fields = ("field",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "project", "role", "created_at")
    list_filter = ("project", "role")
    search_fields = ("user__username",)
