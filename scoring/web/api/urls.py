from django.urls import path
from rest_framework.routers import SimpleRouter

from scoring.web.api import judging, views

# SimpleRouter: the API root view comes from annotate.web.api's DefaultRouter.
router = SimpleRouter(trailing_slash=False)
router.register("model-versions", views.ModelVersionViewSet, basename="api-model-version")
router.register("training-runs", views.TrainingRunViewSet, basename="api-training-run")
router.register("solution-scores", views.SolutionScoreViewSet, basename="api-solution-score")
router.register("step-scores", views.StepScoreViewSet, basename="api-step-score")
router.register("judge-jobs", judging.JudgeJobViewSet, basename="api-judge-job")

urlpatterns = [
    path("score", views.ScoreView.as_view(), name="api-score"),
    path("search", views.SearchView.as_view(), name="api-search"),
    *router.urls,
]
