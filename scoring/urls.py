from django.urls import path

from scoring.web import generation_views, judge_views, review_views, sources_views, training_views, views

app_name = "scoring"
urlpatterns: list = [
    path("", views.model_list, name="models"),
    path("<int:version_id>/rescore/", views.rescore, name="rescore"),
    path("jobs/rescore/<int:pk>/", views.rescore_job, name="rescore-job"),
    path("jobs/rescore/<int:pk>/cancel", views.cancel_rescore, name="rescore-cancel"),
    path("queue/", views.queue, name="queue"),
    path("<int:version_id>/export/", views.export_model, name="export-model"),
    path("<int:version_id>/export/<str:as_kind>.zip", views.download_model, name="download-model"),
    path("review-scores/<int:solution_id>/", review_views.review_scores, name="review-scores"),
    path("sources/", sources_views.sources, name="sources"),
]

# Retraining loop (training_views.py)
urlpatterns += [
    path("training/", training_views.training_runs, name="training-runs"),
    path("jobs/training/<int:pk>/", training_views.training_run, name="training-run"),
    path("versions/<int:version_id>/evaluation/", training_views.model_evaluation, name="evaluation"),
]

# Generation runs (generation_views.py)
urlpatterns += [
    path("generation/", generation_views.generation_runs, name="generation-runs"),
    path("jobs/generation/<int:pk>/", generation_views.generation_run, name="generation-run"),
    path("jobs/generation/<int:pk>/cancel", generation_views.cancel_generation_run, name="generation-cancel"),
]

# Judge labels (judge_views.py)
urlpatterns += [
    path("judge/", judge_views.judge_jobs, name="judge-jobs"),
    path("jobs/judge/<int:pk>/", judge_views.judge_job, name="judge-job"),
    path("jobs/judge/<int:pk>/cancel", judge_views.cancel_judge_job, name="judge-cancel"),
]
