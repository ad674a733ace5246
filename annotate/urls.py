from django.urls import path

from annotate.web import (
    export_views,
    home_views,
    label_views,
    pool_views,
    project_views,
    quality_views,
    review_views,
)

app_name = "annotate"
urlpatterns = [
    path("", home_views.home, name="home"),
    path("demo/remove", home_views.remove_demo, name="remove-demo"),
    path("settings/", project_views.project_settings, name="project-settings"),
    path("label/", label_views.label_start, name="label-start"),
    path("label/next", label_views.label_next, name="label-next"),
    path("label/<int:pk>/", label_views.label_task, name="label-task"),
    path("label/<int:pk>/rate", label_views.label_rate, name="label-rate"),
    path("label/<int:pk>/flag", label_views.label_flag, name="label-flag"),
    path("label/<int:pk>/undo", label_views.label_undo, name="label-undo"),
    path("label/<int:pk>/complete", label_views.label_complete, name="label-complete"),
    path("label/<int:pk>/heartbeat", label_views.label_heartbeat, name="label-heartbeat"),
    path("label/<int:pk>/submit", label_views.label_submit, name="label-submit"),
    path("review/", review_views.review_list, name="review-list"),
    path("review/<int:pk>/", review_views.review_detail, name="review-detail"),
    path("review/<int:pk>/override", review_views.review_override, name="review-override"),
    path("review/<int:pk>/make-gold", review_views.review_make_gold, name="review-make-gold"),
    path("review/<int:pk>/screening", review_views.review_add_to_screening, name="review-add-to-screening"),
    path("quality/", quality_views.quality_report, name="quality"),
    path("quality/<int:user_id>/reset-screening", quality_views.quality_reset_screening,
         name="quality-reset-screening"),
    path("imports/", pool_views.import_list, name="import-list"),
    path("jobs/import/<int:pk>/", pool_views.import_detail, name="import-detail"),
    path("jobs/import/<int:pk>/report", pool_views.import_report, name="import-report"),
    path("exports/", export_views.export_list, name="export-list"),
    path("jobs/export/<int:pk>/", export_views.export_detail, name="export-detail"),
    path("jobs/export/<int:pk>/download", export_views.export_download, name="export-download"),
]
