"""Read shapes of model versions, training runs and scores; the scoring request."""
from rest_framework import serializers

from scoring.models import ModelVersion, SolutionScore, StepScore, TrainingRun

# One request may not tie up a worker for long: bounded items, steps and text sizes.
MAX_ITEMS = 64
MAX_STEPS = 128
MAX_TEXT = 20_000
MAX_TOTAL_TEXT = 400_000


class ModelVersionSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = ModelVersion
        fields = [
            "id", "name", "kind", "status", "is_current", "parent", "weights_sha256", "config", "metrics",
            "trust_remote_code", "created_at",
        ]


class TrainingRunSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    result = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    percent = serializers.IntegerField(read_only=True)

    class Meta:
        model = TrainingRun
        fields = [
            "id", "state", "total", "done", "percent", "error", "config", "parent", "result", "n_labels",
            "loss_curve", "created_at", "finished_at",
        ]


class SolutionScoreSerializer(serializers.ModelSerializer):
    model_version = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = SolutionScore
        fields = ["solution", "model_version", "product", "min", "last", "mean", "sigma"]


class StepScoreSerializer(serializers.ModelSerializer):
    model_version = serializers.SlugRelatedField(slug_field="name", read_only=True)
    solution = serializers.IntegerField(source="step.solution_id", read_only=True)
    index = serializers.IntegerField(source="step.index", read_only=True)

    class Meta:
        model = StepScore
        fields = ["solution", "index", "model_version", "p", "mean", "sigma"]


def not_blank(value: str) -> None:
    if not value.strip():
        raise serializers.ValidationError("Must contain more than whitespace.")


def text(**kwargs) -> serializers.CharField:
    # Whitespace is kept (the model sees the text as sent) but a blank text is refused.
    return serializers.CharField(max_length=MAX_TEXT, trim_whitespace=False, validators=[not_blank], **kwargs)


def step_texts(*, required: bool = True) -> serializers.ListField:
    return serializers.ListField(required=required, child=text(), min_length=1, max_length=MAX_STEPS)


class ScoreItemSerializer(serializers.Serializer):
    problem = text()
    steps = step_texts()


class ScoreRequestSerializer(serializers.Serializer):
    """Either one solution (`problem`, `steps`) or a batch (`items`), and optionally a model name."""

    problem = text(required=False)
    steps = step_texts(required=False)
    items = ScoreItemSerializer(many=True, required=False, min_length=1, max_length=MAX_ITEMS)
    model = serializers.CharField(
        max_length=200, required=False, help_text="A model version name; default the current one"
    )

    def validate(self, data: dict) -> dict:
        single = "problem" in data or "steps" in data
        if single == ("items" in data):
            raise serializers.ValidationError("Send either `problem` and `steps`, or `items` (not both, not neither).")
        if single and not ("problem" in data and "steps" in data):
            raise serializers.ValidationError({"steps" if "problem" in data else "problem": "This field is required."})
        items = data.get("items") or [data]
        total = sum(len(item["problem"]) + sum(map(len, item["steps"])) for item in items)
        if total > MAX_TOTAL_TEXT:
            raise serializers.ValidationError(
                f"The request holds {total} characters of text; at most {MAX_TOTAL_TEXT} are scored in one call."
            )
        return data

    def pairs(self) -> list[tuple[str, list[str]]]:
        data = self.validated_data
        items = data["items"] if "items" in data else [data]
        return [(item["problem"], list(item["steps"])) for item in items]


class StepProbabilitySerializer(serializers.Serializer):
    p = serializers.FloatField(help_text="Probability the step is correct")
    mean = serializers.FloatField(allow_null=True, required=False, help_text="Distributional heads: mean")
    sigma = serializers.FloatField(allow_null=True, required=False, help_text="Distributional heads: std. deviation")


class ScoredItemSerializer(serializers.Serializer):
    steps = StepProbabilitySerializer(many=True)


class ScoreResponseSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="The model version that scored")
    steps = StepProbabilitySerializer(many=True, required=False, help_text="For a single solution")
    items = ScoredItemSerializer(many=True, required=False, help_text="For a batch, in request order")
