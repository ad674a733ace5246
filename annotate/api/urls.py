from django.urls import path
from rest_framework.routers import DefaultRouter

from . import views

router = DefaultRouter(trailing_slash=False)
router.register("problems", views.ProblemViewSet, basename="problem")
router.register("solutions", views.SolutionViewSet, basename="solution")
router.register("annotations", views.AnnotationViewSet, basename="annotation")
router.register("imports", views.ImportJobViewSet, basename="import")
router.register("exports", views.ExportJobViewSet, basename="export")

urlpatterns = [
    path("queue/stats", views.QueueStatsView.as_view(), name="api-queue-stats"),
    path("exports/<str:export_format>.jsonl", views.StreamExportView.as_view(), name="api-export-stream"),
    *router.urls,
]
