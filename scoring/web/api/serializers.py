"""Read shapes of model versions, training runs and scores; the scoring request."""
from typing import Any

from django.conf import settings
from rest_framework import serializers

from annotate.models import Project
from scoring.core import step_scores
from scoring.models import ModelVersion, SolutionScore, StepScore, TrainingRun
from steps import splitting
from steps.arithmetic import AGGREGATIONS
from steps.limits import STEP_CHARS_SETTING, STEPS_SETTING, SolutionLimits, TooBig

# One request may not tie up a worker for long: bounded items, problem and text sizes. A
# solution's steps are held to the limits imports have (steps/limits.py), checked in `validate`.
MAX_ITEMS = 64
MAX_PROBLEM_TEXT = 20_000
MAX_TOTAL_TEXT = 400_000


class ModelVersionSerializer(serializers.ModelSerializer):
    # The metaclass takes declared fields out of the class; the stubs see Field.parent instead.
    parent: serializers.SlugRelatedField[ModelVersion] = serializers.SlugRelatedField(  # type: ignore[assignment]
        slug_field="name", read_only=True, allow_null=True
    )
    # The request's project's current model (`ModelVersion.objects.with_current`).
    is_current = serializers.BooleanField(read_only=True, default=False)
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = ModelVersion
        fields = [
            "id", "name", "kind", "status", "is_current", "project", "parent", "weights_sha256", "config", "metrics",
            "trust_remote_code", "created_at",
        ]


class TrainingRunSerializer(serializers.ModelSerializer):
    # The metaclass takes declared fields out of the class; the stubs see Field.parent instead.
    parent: serializers.SlugRelatedField[ModelVersion] = serializers.SlugRelatedField(  # type: ignore[assignment]
        slug_field="name", read_only=True, allow_null=True
    )
    result: serializers.SlugRelatedField[ModelVersion] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    percent = serializers.IntegerField(read_only=True)

    class Meta:
        model = TrainingRun
        fields = [
            "id", "state", "total", "done", "percent", "error", "config", "parent", "result", "n_labels",
            "loss_curve", "created_at", "finished_at",
        ]


class SolutionScoreSerializer(serializers.ModelSerializer):
    model_version: serializers.SlugRelatedField[ModelVersion] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = SolutionScore
        fields = ["solution", "model_version", "product", "min", "last", "mean", "sigma"]


class StepScoreSerializer(serializers.ModelSerializer):
    model_version: serializers.SlugRelatedField[ModelVersion] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
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
    return serializers.CharField(trim_whitespace=False, validators=[not_blank], **kwargs)


def step_texts(*, required: bool = True) -> serializers.ListField:
    # How many steps and how long each: `check_solution`, by the rule imports follow.
    return serializers.ListField(required=required, child=text(), min_length=1)


# What `split` takes: the splitter's modes that cut a text (`explicit` never does) and the old
# names check_mode still reads, as `import_pool --split` takes them.
SPLIT_CHOICES = (*(mode for mode in splitting.SPLIT_MODES if mode != "explicit"), "blank", "lines")


def completion_text() -> serializers.CharField:
    # Bounded whole by the request's total; once split, its steps are held to the limits sent steps are.
    return serializers.CharField(
        required=False, max_length=MAX_TOTAL_TEXT, trim_whitespace=False, validators=[not_blank],
        help_text="The solution as one text, instead of `steps`: the server cuts it into steps with the splitter "
                  "its imports use and answers each step's `text`")


def split_mode() -> serializers.ChoiceField:
    return serializers.ChoiceField(
        SPLIT_CHOICES, required=False, help_text="How `completion` is cut into steps; default `auto`")


def check_solution(data: dict) -> dict:
    """One solution's text: `steps` or a `completion`, not both; `split` only with a completion."""
    if "steps" in data and "completion" in data:
        raise serializers.ValidationError({"completion": "Send `steps` or `completion`, not both."})
    if "steps" not in data and "completion" not in data:
        raise serializers.ValidationError({"steps": "This field is required (or send `completion`)."})
    if "split" in data and "completion" not in data:
        raise serializers.ValidationError({"split": "Only a `completion` is split; `steps` are scored as sent."})
    if "steps" in data:
        try:
            SolutionLimits.of(settings).check(data["steps"])
        except TooBig as error:
            raise serializers.ValidationError({"steps": f"{error.field} {error.message}"}) from None
    return data


def text_size(item: dict) -> int:
    """The characters of one solution counted against MAX_TOTAL_TEXT; a completion counts whole."""
    return len(item["problem"]) + (len(item["completion"]) if "completion" in item else sum(map(len, item["steps"])))


def split_completion(item: dict) -> None:
    """Cut an item's `completion` into its `steps`, held to the limits sent steps are held to."""
    if "completion" not in item:
        return
    steps = splitting.split_steps(item["completion"], item.get("split", "auto"))
    limits = SolutionLimits.of(settings)
    if not steps or limits.steps_message(len(steps)):
        raise serializers.ValidationError({"completion": (
            f"The completion splits into {len(steps)} steps; 1 to {limits.max_steps} are scored ({STEPS_SETTING}).")})
    too_long = next((index for index, step in enumerate(steps) if limits.chars_message(step)), None)
    if too_long is not None:
        raise serializers.ValidationError({"completion": (
            f"Step {too_long + 1} of the completion holds {len(steps[too_long])} characters; "
            f"at most {limits.max_step_chars} ({STEP_CHARS_SETTING}).")})
    item["steps"] = steps


def token_count(item: dict) -> int:
    """The tokens one split solution may make: its UTF-8 bytes, which a byte-level tokenizer never
    exceeds, and a separator per step (STEPWISE_SCORE_MAX_TOKENS; counted here, without the model)."""
    return len(item["problem"].encode()) + sum(len(step.encode()) + 1 for step in item["steps"])


def check_tokens(items: list[dict], *, field: str) -> None:
    """Refuse a request past STEPWISE_SCORE_MAX_TOKENS, naming `field`: the bound on a request's compute."""
    tokens = sum(map(token_count, items))
    if tokens > settings.STEPWISE_SCORE_MAX_TOKENS:
        raise serializers.ValidationError({field: (
            f"The request may make {tokens} tokens (UTF-8 bytes and a separator per step); "
            f"at most {settings.STEPWISE_SCORE_MAX_TOKENS} (STEPWISE_SCORE_MAX_TOKENS) are scored in one call.")})


def split_each(items: list[dict]) -> None:
    """`split_completion` on every item of a batch; the errors name the items, as DRF's own do."""
    errors: list[Any] = []  # an item's detail, or {} for an item without error
    for item in items:
        try:
            split_completion(item)
            errors.append({})
        except serializers.ValidationError as error:
            errors.append(error.detail)
    if any(errors):
        raise serializers.ValidationError({"items": errors})


class ScoreItemSerializer(serializers.Serializer):
    """One solution: its `steps`, or a `completion` the server cuts into steps by `split`."""

    problem = text(max_length=MAX_PROBLEM_TEXT)
    steps = step_texts(required=False)
    completion = completion_text()
    split = split_mode()

    def validate(self, data: dict) -> dict:
        return check_solution(data)


class ScoreRequestSerializer(serializers.Serializer):
    """Either one solution (`problem`, and `steps` or `completion`) or a batch (`items`), and optionally a model."""

    problem = text(required=False, max_length=MAX_PROBLEM_TEXT)
    steps = step_texts(required=False)
    completion = completion_text()
    split = split_mode()
    # many=True makes a ListSerializer, which takes min_length and max_length; the stubs check
    # the arguments against ScoreItemSerializer's own __init__.
    items = ScoreItemSerializer(many=True, required=False, min_length=1, max_length=MAX_ITEMS)  # type: ignore[call-arg]
    model = serializers.CharField(
        max_length=200, required=False, help_text="A model version name; default the current one"
    )

    def validate(self, data: dict) -> dict:
        single = any(field in data for field in ("problem", "steps", "completion", "split"))
        if single == ("items" in data):
            raise serializers.ValidationError(
                "Send either `problem` with `steps` or `completion`, or `items` (not both, not neither).")
        if single:
            if "problem" not in data:
                raise serializers.ValidationError({"problem": "This field is required."})
            check_solution(data)
        items = data.get("items") or [data]
        total = sum(map(text_size, items))
        if total > MAX_TOTAL_TEXT:
            raise serializers.ValidationError(
                f"The request holds {total} characters of text; at most {MAX_TOTAL_TEXT} are scored in one call."
            )
        # Split only once the request is known to be within its total: splitting is the costly part.
        if single:
            split_completion(data)
            check_tokens(items, field="completion" if "completion" in data else "steps")
        else:
            split_each(items)
            check_tokens(items, field="items")
        return data

    def _items(self) -> list[dict]:
        data = self.validated_data
        return data["items"] if "items" in data else [data]

    def pairs(self) -> list[tuple[str, list[str]]]:
        return [(item["problem"], list(item["steps"])) for item in self._items()]

    def split_texts(self) -> list[list[str] | None]:
        """The steps cut from each item's completion; None for an item sent as steps."""
        return [list(item["steps"]) if "completion" in item else None for item in self._items()]


class StepProbabilitySerializer(serializers.Serializer):
    p = serializers.FloatField(help_text="Probability the step is correct")
    mean = serializers.FloatField(allow_null=True, required=False, help_text="Distributional heads: mean")
    sigma = serializers.FloatField(allow_null=True, required=False, help_text="Distributional heads: std. deviation")
    spread = serializers.FloatField(
        allow_null=True, required=False,
        help_text="Std. deviation of p across the model's bootstrap ensemble; null when it has none")


class SolutionAggregateSerializer(serializers.Serializer):
    """A solution's scores from its steps, by `step_scores.aggregate`: what rescoring stores."""

    product = serializers.FloatField(help_text="Every step right: the product of the steps' p")
    min = serializers.FloatField(help_text="As good as its weakest step")
    last = serializers.FloatField(help_text="The PRM's verdict after the last step")
    mean = serializers.FloatField()
    sigma = serializers.FloatField(allow_null=True, help_text="Distributional heads: the steps' mean sigma")


SOLUTION_SCORE_HELP = "The solution's scores from its steps (RL trainers' per-completion reward)"


class ScoredStepSerializer(StepProbabilitySerializer):
    text = serializers.CharField(
        required=False, help_text="For a solution sent as `completion`: the step's text, as the server cut it")


class ScoredItemSerializer(serializers.Serializer):
    steps = ScoredStepSerializer(many=True)
    score = SolutionAggregateSerializer(help_text=SOLUTION_SCORE_HELP)


class ScoreResponseSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="The model version that scored")
    steps = ScoredStepSerializer(many=True, required=False, help_text="For a single solution")
    score = SolutionAggregateSerializer(required=False, help_text=f"For a single solution: {SOLUTION_SCORE_HELP}")
    items = ScoredItemSerializer(many=True, required=False, help_text="For a batch, in request order")


def scored_item(steps: list[dict], texts: list[str] | None = None) -> dict:
    """One solution as /api/score answers it: its steps (with their `texts` when the server cut
    them) and, computed from them by the one rule (`step_scores.aggregate`), its score, so that
    no client has to repeat the rule."""
    probabilities = [step_scores.StepProbability(p=s["p"], mean=s.get("mean"), sigma=s.get("sigma")) for s in steps]
    if texts is not None:
        steps = [{**step, "text": text} for step, text in zip(steps, texts, strict=True)]
    return {"steps": steps, "score": step_scores.aggregate(probabilities)}


# --- POST /api/search --------------------------------------------------------------------

# scoring.search.METHODS, spelled here because importing it would import torch into the web process.
SEARCH_METHODS = ("best_of_n", "beam", "mcts", "aca")


class SearchBudgetSerializer(serializers.Serializer):
    max_tokens = serializers.IntegerField(
        min_value=1, help_text="Most generated tokens (at most STEPWISE_SEARCH_MAX_TOKENS)")
    max_prm_calls = serializers.IntegerField(
        min_value=1, required=False, help_text="Most PRM calls (one per scored path)")

    def validate_max_tokens(self, value: int) -> int:
        if value > settings.STEPWISE_SEARCH_MAX_TOKENS:
            raise serializers.ValidationError(f"At most {settings.STEPWISE_SEARCH_MAX_TOKENS} tokens per search.")
        return value


def small_int(high: int, help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=high, required=False, help_text=help_text)


class SearchOptionsSerializer(serializers.Serializer):
    """Every option any method takes; one a method does not take is refused by name (400)."""

    aggregation = serializers.ChoiceField(AGGREGATIONS, required=False, help_text="Solution score from steps")
    n = small_int(64, "best_of_n: samples")
    beam_width = small_int(16, "beam: beams kept")
    expansions = small_int(16, "beam: next steps sampled per beam")
    lookahead = serializers.IntegerField(min_value=0, max_value=1, required=False, help_text="beam: 0 or 1")
    simulations = small_int(256, "mcts: simulations")
    expansion_width = small_int(16, "mcts: children per expanded node")
    c_puct = serializers.FloatField(min_value=0, max_value=100, required=False, help_text="mcts: exploration")
    n0 = small_int(64, "aca: first samples")
    n_total = small_int(64, "aca: most samples")
    m = small_int(64, "aca: samples added per round")
    lam = serializers.FloatField(min_value=0, max_value=1e6, required=False, help_text="aca: bound width in sigmas")
    max_solution_tokens = small_int(4096, "best_of_n, aca: tokens per sampled solution")
    max_step_tokens = small_int(1024, "beam, mcts: tokens per step")
    max_steps = small_int(64, "beam, mcts: steps per solution")
    temperature = serializers.FloatField(min_value=0, max_value=5, required=False)
    top_p = serializers.FloatField(min_value=0.01, max_value=1, required=False)
    seed = serializers.IntegerField(min_value=0, required=False)

    def to_internal_value(self, data):
        # DRF drops unknown keys; a misspelt option must not run silently with its default.
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(dict.fromkeys(unknown, "Unknown option."))
        return super().to_internal_value(data)


class SearchRequestSerializer(serializers.Serializer):
    problem = text()
    method = serializers.ChoiceField(SEARCH_METHODS)
    budget = SearchBudgetSerializer()
    options = SearchOptionsSerializer(required=False)
    model = serializers.CharField(
        max_length=200, required=False, help_text="A model version name; default the current one")

    def body(self) -> dict:
        """What the worker runs: plain JSON, the options a client sent and nothing else."""
        data = self.validated_data
        return {"problem": data["problem"], "method": data["method"], "budget": dict(data["budget"]),
                "options": dict(data.get("options", {}))}


class SearchSolutionSerializer(serializers.Serializer):
    steps = serializers.ListField(child=serializers.CharField())
    scores = StepProbabilitySerializer(many=True)
    answer = serializers.CharField(allow_null=True)
    complete = serializers.BooleanField()
    value = serializers.FloatField(allow_null=True, help_text="The aggregated score the method ranked by")
    sigma = serializers.FloatField(allow_null=True)
    tokens = serializers.IntegerField()


class SpentBudgetSerializer(serializers.Serializer):
    max_tokens = serializers.IntegerField(allow_null=True)
    max_prm_calls = serializers.IntegerField(allow_null=True, help_text="null: no cap")


class SearchComputeSerializer(serializers.Serializer):
    generated_tokens = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    generator_calls = serializers.IntegerField()
    samples = serializers.IntegerField()
    prm_calls = serializers.IntegerField()
    budget = SpentBudgetSerializer()


class SearchResponseSerializer(serializers.Serializer):
    model = serializers.CharField()
    generator = serializers.CharField()
    method = serializers.CharField()
    aggregation = serializers.CharField()
    stopped = serializers.ChoiceField(["done", "budget"])
    solution = SearchSolutionSerializer(allow_null=True)
    candidates = serializers.IntegerField(help_text="Complete solutions the method compared")
    compute = SearchComputeSerializer()
    details = serializers.DictField(help_text="Method-specific: rounds, simulations, ACA's stop")
