"""The model side's REST API: model versions, training runs, stored scores, and live scoring.

Everything is the request's project's (`project_of(request)`, from the project in the URL): its
model versions (`ModelVersion.objects.usable_in`: its lineage and the public PRMs, with
`is_current` for the project), its runs, the scores of its solutions, and scoring with its
current model; another project's objects are not found."""
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from django.conf import settings
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers as drf_serializers
from rest_framework import status, viewsets
from rest_framework.exceptions import APIException, Throttled
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.labeling.roles import project_of
from annotate.web.api.permissions import IsReviewer
from infra import throttling
from scoring import on_worker
from scoring.models import ModelVersion, SolutionScore, StepScore, TrainingRun
from scoring.store import registry
from scoring.web.api import serializers
from steps import limits


class ModelVersionViewSet(viewsets.ReadOnlyModelViewSet):
    """The PRM versions the project may use, their evaluation metrics and which one is its current
    model (reviewers and admins)."""

    queryset = ModelVersion.objects.none()  # per request: get_queryset
    serializer_class = serializers.ModelVersionSerializer
    permission_classes = [IsReviewer]
    filterset_fields = ["status", "kind", "name"]

    def get_queryset(self):
        project = project_of(self.request)
        return ModelVersion.objects.usable_in(project).with_current(project).select_related("parent").order_by("-id")


class TrainingRunViewSet(viewsets.ReadOnlyModelViewSet):
    """The project's training runs with state, loss curve and the version they produced."""

    queryset = TrainingRun.objects.none()  # per request: get_queryset
    serializer_class = serializers.TrainingRunSerializer
    permission_classes = [IsReviewer]
    filterset_fields = ["state"]

    def get_queryset(self):
        return (TrainingRun.objects.filter(project=project_of(self.request)).select_related("parent", "result")
                .order_by("-id"))


class SolutionScoreViewSet(viewsets.ReadOnlyModelViewSet):
    """Stored solution-level scores (product, min, last, mean) of the project's solutions per model version."""

    queryset = SolutionScore.objects.none()  # per request: get_queryset
    serializer_class = serializers.SolutionScoreSerializer
    permission_classes = [IsReviewer]
    filterset_fields = ["solution", "model_version"]

    def get_queryset(self):
        return (SolutionScore.objects.filter(solution__project=project_of(self.request)).select_related("model_version")
                .order_by("id"))


class StepScoreViewSet(viewsets.ReadOnlyModelViewSet):
    """Stored per-step scores of the project's solutions; filter by `solution` to get one solution's
    steps in order."""

    queryset = StepScore.objects.none()  # per request: get_queryset
    serializer_class = serializers.StepScoreSerializer
    permission_classes = [IsReviewer]
    filterset_fields = {"step__solution": ["exact"], "model_version": ["exact"]}

    def get_queryset(self):
        return (StepScore.objects.filter(step__solution__project=project_of(self.request))
                .select_related("model_version", "step").order_by("step__solution_id", "step__index", "id"))


SCORE_DESCRIPTION = f"""
Per-step probabilities that each step is correct, from the project's current PRM version or the
one named in `model`: a dense reward source for RL trainers (one reward per step).

Send one solution as `{{"problem": ..., "steps": [...]}}` or up to {serializers.MAX_ITEMS} as
`{{"items": [{{"problem": ..., "steps": [...]}}, ...]}}`, at most {serializers.MAX_TOTAL_TEXT} characters of
text in all and at most STEPWISE_SCORE_MAX_TOKENS tokens, counted as the UTF-8 bytes of the
problems and steps plus one per step (no byte-level tokenizer makes more); larger requests get a
400 naming the limit. A user has at most STEPWISE_SCORE_IN_FLIGHT requests in flight (429 past
it); one not answered within STEPWISE_SCORE_API_TIMEOUT gets 503 and is not computed on. Instead
of `steps`, a solution may be one text, `"completion": "..."`, with an optional `"split"` mode
({", ".join(serializers.SPLIT_CHOICES)}; default auto): the server cuts it into steps with the
splitter its imports and generation use, holds them to the limits sent steps have
(STEPWISE_IMPORT_MAX_STEPS steps of at most STEPWISE_IMPORT_MAX_STEP_CHARS characters, as imports; by
default {limits.MAX_STEPS} of {limits.MAX_STEP_CHARS:,}), and answers each
step's `text` beside its scores. Distributional models also return each step's `mean` and
`sigma`. `spread` is the standard deviation of the step's probability across the model's
bootstrap ensemble of heads (epistemic: how much more labels could change it), once the version
has one (fitted at its first queue rebuild with labels, refitted when they change); null when it
has none.

```
curl -X POST https://stepwise.example/api/score \\
  -H "Authorization: Token $STEPWISE_TOKEN" -H "Content-Type: application/json" \\
  -d '{{"problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "# Answer\\n\\n5"]}}'
```

```python
import requests
rewards = requests.post(f"{{base}}/api/score", headers={{"Authorization": f"Token {{token}}"}},
                        json={{"items": [{{"problem": q, "steps": s}} for q, s in batch]}}).json()
step_rewards = [[step["p"] for step in item["steps"]] for item in rewards["items"]]
```
"""


class ScoreRateThrottle(throttling.UserRate):
    """STEPWISE_SCORE_RATE requests per user, counted as every limit is (infra/throttling.py).

    Each request holds the score worker for up to a forward pass; one client must not take it all.
    """

    scope = "score"

    def rate(self) -> str:
        return settings.STEPWISE_SCORE_RATE


class ScoreView(APIView):
    permission_classes = [IsReviewer]
    throttle_classes = [ScoreRateThrottle]

    @extend_schema(
        request=serializers.ScoreRequestSerializer,
        responses={
            200: serializers.ScoreResponseSerializer,
            400: OpenApiResponse(description="Bad body, batch too large, or unknown model"),
            413: OpenApiResponse(description="Body over STEPWISE_MAX_BODY_BYTES"),
            429: OpenApiResponse(description="Over STEPWISE_SCORE_RATE for this user, STEPWISE_SCORE_IN_FLIGHT of "
                                             "the user's requests or STEPWISE_SCORE_CONCURRENCY of this process's "
                                             "already wait on the worker; retry after `Retry-After`"),
            503: OpenApiResponse(description="No model to score with, or no score worker answered in time"),
        },
        summary="Score the steps of solutions (sent as steps or as one text to split) with a PRM",
        description=SCORE_DESCRIPTION,
        examples=[
            OpenApiExample(
                "One solution",
                request_only=True,
                value={"problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "# Answer\n\n5"]},
            ),
            OpenApiExample(
                "A completion the server splits",
                request_only=True,
                value={"problem": "What is 2 + 3?", "completion": "2 + 3 = 5.\n\n# Answer\n\n5", "split": "auto"},
            ),
            OpenApiExample(
                "Scores", response_only=True,
                value={"model": "prm-gen-3", "steps": [{"p": 0.97, "mean": None, "sigma": None, "spread": 0.02},
                                                        {"p": 0.95, "mean": None, "sigma": None, "spread": 0.11}]},
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        with waiting_place(request, what="scoring", timeout=settings.STEPWISE_SCORE_API_TIMEOUT):
            return self._score(request)

    def _score(self, request: Request) -> Response:
        body = serializers.ScoreRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        model_version = model_version_asked(request, body.validated_data.get("model"))
        if model_version is None:
            return Response({"detail": "No current model version; name one in `model`."},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        try:
            # Computed by the score worker; this process never imports torch.
            scored = on_worker.score_on_worker(items=body.pairs(), model_version=model_version)
        except on_worker.ScoringUnavailable as error:
            return Response({"detail": str(error)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        except ValueError as error:
            raise drf_serializers.ValidationError({"items": str(error)}) from None
        results = [serializers.scored_item([_step(p) for p in steps], texts)
                   for steps, texts in zip(scored, body.split_texts(), strict=True)]
        if "items" in body.validated_data:
            return Response({"model": model_version.name, "items": results})
        return Response({"model": model_version.name, **results[0]})



def model_version_asked(request: Request, name: str | None) -> ModelVersion | None:
    """The version `model` names among those the project may use, else its current one (None: none is)."""
    try:
        return registry.find_version(name, project=project_of(request))
    except registry.UnknownModelVersion as error:
        raise drf_serializers.ValidationError({"model": str(error)}) from None


class Unavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Scoring is unavailable; try again shortly."


@contextmanager
def waiting_place(request: Request, *, what: str, timeout: float) -> Iterator[None]:
    """on_worker.place_to_wait for the request's user, taken before its body is read; 429 without one."""
    with ExitStack() as place:
        try:
            place.enter_context(on_worker.place_to_wait(user_id=request.user.pk, what=what, timeout=timeout))
        except on_worker.WorkerBusy as busy:
            raise Throttled(wait=busy.retry_after, detail=str(busy)) from None
        except on_worker.ScoringUnavailable as error:
            raise Unavailable(detail=str(error)) from None
        yield


def _step(probability: dict) -> dict:
    return {"p": probability["p"], "mean": probability.get("mean"), "sigma": probability.get("sigma"),
            "spread": probability.get("spread")}


SEARCH_DESCRIPTION = """
Solve a problem by PRM-guided search: the generator writes, the project's current PRM (or the one
named in `model`) scores every step, and the method picks one solution. Methods: `best_of_n`,
`beam` (step-level beam search, lookahead 0/1), `mcts` (PUCT, the PRM's step score as value)
and `aca` (adaptive best-of-N with a BetaPRM head: stops when one candidate dominates).
`budget.max_tokens` (generated tokens) is required and `budget.max_prm_calls` optional: no
method passes them; `stopped` says whether the method finished or ran out of budget, and
`compute` what it spent. An option the method does not take is a 400 naming it.

```
curl -X POST https://stepwise.example/api/search -H "Authorization: Token $STEPWISE_TOKEN" \\
  -H "Content-Type: application/json" \\
  -d '{"problem": "What is 2 + 3?", "method": "beam", "budget": {"max_tokens": 2000},
       "options": {"beam_width": 4, "expansions": 4, "aggregation": "min"}}'
```
"""


class SearchRateThrottle(throttling.UserRate):
    """STEPWISE_SEARCH_RATE searches per user: each one holds the score worker for many generations."""

    scope = "search"

    def rate(self) -> str:
        return settings.STEPWISE_SEARCH_RATE


class SearchView(APIView):
    permission_classes = [IsReviewer]
    throttle_classes = [SearchRateThrottle]

    @extend_schema(
        request=serializers.SearchRequestSerializer,
        responses={
            200: serializers.SearchResponseSerializer,
            400: OpenApiResponse(description="Bad body, an option the method does not take, or unknown model"),
            429: OpenApiResponse(description="Over STEPWISE_SEARCH_RATE for this user, STEPWISE_SCORE_IN_FLIGHT of "
                                             "the user's requests or STEPWISE_SCORE_CONCURRENCY of this process's "
                                             "already wait on the worker; retry after `Retry-After`"),
            503: OpenApiResponse(description="No model, or no score worker answered within "
                                             "STEPWISE_SEARCH_API_TIMEOUT"),
        },
        summary="Solve a problem by PRM-guided search within a compute budget",
        description=SEARCH_DESCRIPTION,
        examples=[OpenApiExample("Beam search", request_only=True, value={
            "problem": "What is 2 + 3?", "method": "beam", "budget": {"max_tokens": 2000, "max_prm_calls": 64},
            "options": {"beam_width": 4, "expansions": 4, "lookahead": 0, "aggregation": "min"}})],
    )
    def post(self, request: Request) -> Response:
        with waiting_place(request, what="search", timeout=settings.STEPWISE_SEARCH_API_TIMEOUT):
            return self._search(request)

    def _search(self, request: Request) -> Response:
        body = serializers.SearchRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        model_version = model_version_asked(request, body.validated_data.get("model"))
        if model_version is None:
            return Response({"detail": "No current model version; name one in `model`."},
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        try:
            # Generated and scored by the score worker; this process never imports torch.
            return Response(on_worker.search_on_worker(body=body.body(), model_version=model_version))
        except on_worker.ScoringUnavailable as error:
            return Response({"detail": str(error)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        except ValueError as error:
            raise drf_serializers.ValidationError({"options": str(error)}) from None
