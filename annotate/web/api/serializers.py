"""Read shapes of the pool, labels and jobs for machine clients, and the export request."""
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework import serializers

from annotate.labeling import roles
from annotate.models import (
    Annotation,
    Completion,
    ExportJob,
    FinishReason,
    ImportJob,
    Problem,
    Project,
    Solution,
    Step,
    StepLabel,
)
from annotate.pool import exporting, importing
from steps import splitting


class ProblemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Problem
        fields = ["id", "statement", "ground_truth_solution", "ground_truth_answer", "source", "split", "created_at"]


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["index", "text", "gold_rating"]


class SolutionSerializer(serializers.ModelSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta:
        model = Solution
        fields = [
            "id", "problem", "steps", "final_answer", "is_correct", "grading_note", "source", "generator",
            "is_reference", "is_gold", "pre_generated_answer", "pre_generated_verifier_score", "meta", "sample_count",
            "created_at",
        ]


class CompletionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Completion
        fields = ["index", "text", "rating", "flagged"]


class StepLabelSerializer(serializers.ModelSerializer):
    completions = CompletionSerializer(many=True, read_only=True)

    class Meta:
        model = StepLabel
        fields = ["index", "completions", "chosen_completion", "human_completion", "time_ms"]


# What an annotation says about how its item was chosen: a gold (quality-control) item, a
# screening item (generation -1), a queue generation. Reviewers only: an annotator who can
# tell a gold item apart labels it with a care the rest of the queue does not get, and QC
# then measures nothing. annotate.web.api.views keeps annotators from filtering on them too.
REVIEWER_ONLY_ANNOTATION_FIELDS = ("generation", "is_quality_control", "is_initial_screening")


class AnnotationSerializer(serializers.ModelSerializer):
    annotator: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    step_labels = StepLabelSerializer(many=True, read_only=True)

    def get_fields(self):
        fields = super().get_fields()
        request = self.context.get("request")
        project = getattr(request, "project", None)  # none while the schema is generated
        if request is None or project is None or not roles.is_reviewer(request.user, project):
            for name in REVIEWER_ONLY_ANNOTATION_FIELDS:
                del fields[name]
        return fields

    class Meta:
        model = Annotation
        fields = [
            "id", "solution", "annotator", "labeler", "status", "finish_reason", "finish_note", "total_time_ms",
            "generation", "is_quality_control", "is_initial_screening", "timestamp", "step_labels",
            "created_at", "updated_at",
        ]


class ProjectSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    api_url = serializers.SerializerMethodField()

    class Meta:
        model = Project
        fields = ["slug", "name", "description", "guideline_version", "role", "url", "api_url"]

    def get_role(self, project: Project) -> str | None:
        return roles.role_in(self.context["request"].user, project)

    def get_url(self, project: Project) -> str:
        return f"/p/{project.slug}/"

    def get_api_url(self, project: Project) -> str:
        return f"/p/{project.slug}/api/"


class QueueCountsSerializer(serializers.Serializer):
    generation = serializers.IntegerField()
    available = serializers.IntegerField()
    leased = serializers.IntegerField()
    done = serializers.IntegerField()
    retired = serializers.IntegerField()


class QueueStatsSerializer(serializers.Serializer):
    current_generation = serializers.IntegerField()
    submitted_annotations = serializers.IntegerField()
    generations = QueueCountsSerializer(many=True)


JOB_FIELDS = ["id", "state", "total", "done", "percent", "error", "created_by", "created_at", "finished_at"]


class ImportJobSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    percent = serializers.IntegerField(read_only=True)

    class Meta:
        model = ImportJob
        fields = JOB_FIELDS + ["original_name", "format", "split_mode", "source", "atomic", "created", "duplicates",
                               "errors", "graded_right", "graded_wrong", "graded_unknown", "queued"]


class ExportJobSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    percent = serializers.IntegerField(read_only=True)
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = ExportJob
        fields = JOB_FIELDS + ["format", "options", "lines", "skipped", "download_url"]

    def get_download_url(self, job: ExportJob) -> str | None:
        if exporting.finished_file(job) is None:
            return None
        request = self.context.get("request")
        url = reverse("api-export-download", kwargs={"pk": job.pk})
        return request.build_absolute_uri(url) if request else url


class ImportRequestSerializer(serializers.Serializer):
    """A JSONL file to import in the background (see annotate.pool.importing for the formats)."""

    file = serializers.FileField()
    format = serializers.ChoiceField(choices=importing.names(), default="auto")
    split_mode = serializers.ChoiceField(choices=splitting.SPLIT_MODES, default="auto")
    # The metaclass takes declared fields out of the class; the stubs see Field.source instead.
    source = serializers.CharField(  # type: ignore[assignment]
        max_length=100, required=False, allow_blank=True, default=""
    )
    atomic = serializers.BooleanField(default=False, help_text="One bad line and nothing is imported")


class ExportRequestSerializer(serializers.Serializer):
    """What to export; every field optional (default: PRM800K, all generations, no QC)."""

    format = serializers.ChoiceField(choices=list(exporting.FORMATS), default="prm800k")
    generations = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=1000)
    since = serializers.DateTimeField(required=False, allow_null=True)
    include_qc = serializers.BooleanField(default=False)
    finish_reasons = serializers.ListField(
        child=serializers.ChoiceField(choices=FinishReason.choices), required=False, max_length=10
    )
    neutral_is_good = serializers.BooleanField(default=True)
    container = serializers.ChoiceField(
        choices=exporting.CONTAINERS, default="jsonl",
        help_text="jsonl, or a .zip of a Parquet folder or a `datasets` folder, each with a dataset card",
    )
    labels = serializers.ChoiceField(
        choices=exporting.LABEL_SOURCES, default="human",
        help_text="human, automatic or both (each row says which; prm800k: adds auto_labels per step), judge (a "
                  "verifier model's verdicts alone) or consensus (only the steps the consensus sources agree on)",
    )
    consensus = serializers.ListField(
        child=serializers.ChoiceField(choices=exporting.CONSENSUS_SOURCES), required=False, max_length=3,
        help_text=f"With labels=consensus: two or more of {', '.join(exporting.CONSENSUS_SOURCES)} "
                  f"(default {', '.join(exporting.DEFAULT_CONSENSUS)})",
    )

    def validate(self, data: dict) -> dict:
        try:
            exporting.check_labels(data.get("format", "prm800k"), exporting.ExportOptions.from_dict(data))
        except exporting.ExportError as error:
            # The message starts with the option it is about ("consensus: ...", "labels: ...").
            field = str(error).partition(":")[0]
            raise serializers.ValidationError({field if field in self.fields else "labels": str(error)}) from None
        return data


class RolloutWordSerializer(serializers.Serializer):
    soft = serializers.FloatField(help_text="K/N: the share of continuations that reached the answer")
    n_correct = serializers.IntegerField(allow_null=True)
    n_rollouts = serializers.IntegerField(allow_null=True)
    good = serializers.BooleanField()


class JudgeWordSerializer(serializers.Serializer):
    soft = serializers.FloatField(help_text="The judge's P(step is good)")
    critique = serializers.CharField()
    good = serializers.BooleanField()


class StepSourcesSerializer(serializers.Serializer):
    """One step with every label source's word on it (annotate.labeling.sources.StepSources)."""

    index = serializers.IntegerField()
    text = serializers.CharField()
    human = serializers.ListField(child=serializers.IntegerField(),
                                  help_text="Each submitted label's rating of the step (-1, 0, 1)")
    rollouts = RolloutWordSerializer(source="rollout", allow_null=True, help_text="The latest rollout run's label")
    judge = JudgeWordSerializer(allow_null=True, help_text="The latest judge run's verdict")
    prm = serializers.FloatField(allow_null=True, help_text="The project's current model's P(step is right)")
    verdicts = serializers.DictField(child=serializers.BooleanField(allow_null=True),
                                     help_text="Each source's verdict: true good, false bad, null nothing said")


class SolutionSourcesSerializer(serializers.Serializer):
    solution = serializers.IntegerField()
    steps = StepSourcesSerializer(many=True)
