from django.urls import path

from . import export_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("exports/", export_views.export_list, name="export-list"),
    path("exports/<int:job_id>/", export_views.export_detail, name="export-detail"),
    path("exports/<int:job_id>/download", export_views.export_download, name="export-download"),
]
