from django.urls import path

from . import views

app_name = "scoring"
urlpatterns: list = [
    path("", views.model_list, name="models"),
    path("<int:version_id>/rescore/", views.rescore, name="rescore"),
    path("rescore/<int:job_id>/", views.rescore_job, name="rescore-job"),
    path("queue/", views.queue, name="queue"),
]
