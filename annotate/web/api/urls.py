from django.urls import path
from rest_framework.routers import DefaultRouter

from annotate.web.api import views

router = DefaultRouter(trailing_slash=False)
router.register("projects", views.ProjectViewSet, basename="api-project")
router.register("problems", views.ProblemViewSet, basename="api-problem")
router.register("solutions", views.SolutionViewSet, basename="api-solution")
router.register("annotations", views.AnnotationViewSet, basename="api-annotation")
router.register("imports", views.ImportJobViewSet, basename="api-import")
router.register("exports", views.ExportJobViewSet, basename="api-export")

urlpatterns = [
    path("queue/stats", views.QueueStatsView.as_view(), name="api-queue-stats"),
    path("exports/<str:export_format>.jsonl", views.StreamExportView.as_view(), name="api-export-stream"),
    *router.urls,
]
