"""The judge labeling API (admins, as imports and exports): start a judge job, then poll it by id.

`POST /api/judge-jobs` with the options `label_judge` takes; `GET /api/judge-jobs/<id>` answers its
state, progress, unparseable count and tokens. The project's jobs only: another's answer 404.
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from annotate.web.api.views import JobViewSet
from scoring.generation import judge_labeling
from scoring.generation.generators import SamplingParams
from scoring.generation.labeling_jobs import spec_from_option
from scoring.models import JudgeLabelJob


class JudgeJobSerializer(serializers.ModelSerializer):
    percent = serializers.IntegerField(read_only=True)
    judge = serializers.CharField(source="run.source", read_only=True, help_text="local:FOLDER or openai:URL/MODEL")
    prompt_version = serializers.CharField(source="run.params.prompt_version", read_only=True)
    tokens = serializers.IntegerField(source="run.tokens", read_only=True, help_text="Tokens the judge generated")

    class Meta:
        model = JudgeLabelJob
        fields = ["id", "state", "total", "done", "percent", "skipped", "unparseable", "tokens", "run", "judge",
                  "prompt_version", "error", "created_at", "finished_at"]


class JudgeRequestSerializer(serializers.Serializer):
    generator = serializers.JSONField(
        default=dict, help_text='"default" (the local SmolLM2, also when left out), a local model folder, or a '
                                'generator spec object ({"backend": "openai", "base_url": ..., "model": ...})')
    solution_ids = serializers.ListField(child=serializers.IntegerField(), required=False, allow_null=True,
                                         default=None, help_text="Default: every eligible solution")
    limit = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1)
    max_tokens = serializers.IntegerField(default=judge_labeling.DEFAULT_PARAMS.max_tokens, min_value=1,
                                          max_value=32768)
    temperature = serializers.FloatField(default=0.0, min_value=0.0)

    def validate_generator(self, value) -> dict:
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            try:
                return spec_from_option(value)
            except ValueError as error:
                raise ValidationError(str(error)) from None
        raise ValidationError("a generator is a string or a spec object")


@extend_schema_view(create=extend_schema(
    request=JudgeRequestSerializer, responses={201: JudgeJobSerializer},
    summary="Start a judge labeling job (a verifier model's verdict and critique per step); poll it for progress"))
class JudgeJobViewSet(JobViewSet):
    """Judge labeling jobs (admins): create one, poll its progress, unparseable answers and tokens."""

    queryset = JudgeLabelJob.objects.select_related("run").order_by("-id")
    serializer_class = JudgeJobSerializer
    request_serializer = JudgeRequestSerializer
    filterset_fields = ["state"]

    def start(self, data: dict, *, user, project) -> JudgeLabelJob:  # type: ignore[override]
        params = SamplingParams(max_tokens=data["max_tokens"], temperature=data["temperature"], top_p=1.0)
        try:
            return judge_labeling.start_judge_labeling(
                project=project, generator_spec=data["generator"], solution_ids=data["solution_ids"],
                limit=data["limit"], params=params, created_by=user)
        except ValueError as error:
            raise ValidationError({"detail": str(error)}) from None
