from django.urls import path

from . import training_views, views

app_name = "scoring"
urlpatterns: list = [
    path("", views.model_list, name="models"),
    path("<int:version_id>/rescore/", views.rescore, name="rescore"),
    path("rescore/<int:job_id>/", views.rescore_job, name="rescore-job"),
    path("queue/", views.queue, name="queue"),
]

# Retraining loop (training_views.py)
urlpatterns += [
    path("training/", training_views.training_runs, name="training-runs"),
    path("jobs/training/<int:pk>/", training_views.training_run, name="training-run"),
    path("versions/<int:version_id>/evaluation/", training_views.model_evaluation, name="evaluation"),
]
