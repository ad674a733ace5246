from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from annotate.web.api.permissions import ReviewerSomewhere
from infra.login_lockout import remembers_device

# The API's map is for its clients (reviewers' and admins' scripts), not for annotators.
schema_readers = [ReviewerSomewhere]

urlpatterns = [
    # Both login forms leave a device cookie on a successful login (infra/login_lockout.py).
    path("admin/login/", remembers_device(admin.site.login)),
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico whatever the page links; the icon is an SVG in static/.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"))),
    path("accounts/login/", remembers_device(auth_views.LoginView.as_view()), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(permission_classes=schema_readers), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: the CSP allows no inline script.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", permission_classes=schema_readers),
         name="api-docs"),
    path("api/", include("annotate.web.api.urls")),
    path("api/", include("scoring.web.api.urls")),
    path("models/", include("scoring.urls")),
    path("", include("annotate.urls")),
]
