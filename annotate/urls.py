from django.urls import path

from . import export_views, pool_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("label/", views.label_start, name="label-start"),
    path("label/next", views.label_next, name="label-next"),
    path("label/<int:pk>/", views.label_task, name="label-task"),
    path("label/<int:pk>/rate", views.label_rate, name="label-rate"),
    path("label/<int:pk>/flag", views.label_flag, name="label-flag"),
    path("label/<int:pk>/undo", views.label_undo, name="label-undo"),
    path("label/<int:pk>/complete", views.label_complete, name="label-complete"),
    path("label/<int:pk>/heartbeat", views.label_heartbeat, name="label-heartbeat"),
    path("label/<int:pk>/submit", views.label_submit, name="label-submit"),
    path("review/", views.review_list, name="review-list"),
    path("review/<int:pk>/", views.review_detail, name="review-detail"),
    path("review/<int:pk>/override", views.review_override, name="review-override"),
    path("review/<int:pk>/make-gold", views.review_make_gold, name="review-make-gold"),
    path("review/<int:pk>/screening", views.review_add_to_screening, name="review-add-to-screening"),
    path("quality/", views.quality_report, name="quality"),
    path("quality/<int:user_id>/reset-screening", views.quality_reset_screening, name="quality-reset-screening"),
    path("imports/", pool_views.import_upload, name="import_upload"),
    path("imports/<int:job_id>/", pool_views.import_detail, name="import_detail"),
    path("imports/<int:job_id>/progress", pool_views.import_progress, name="import_progress"),
    path("imports/<int:job_id>/report", pool_views.import_report, name="import_report"),
    path("exports/", export_views.export_list, name="export-list"),
    path("jobs/export/<int:pk>/", export_views.export_detail, name="export-detail"),
    path("jobs/export/<int:pk>/download", export_views.export_download, name="export-download"),
]
