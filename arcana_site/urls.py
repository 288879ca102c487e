"""Site URLs: health, auth, the API under /api/v1/, and the dashboard pages."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from arcana_site import login, views
from traces.otlp.api import OtlpTracesView
from traces.urls import team_urlpatterns

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", login.LoginView.as_view(), name="login"),  # throttled (arcana_site/login.py)
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("traces.api_urls")),
    # OTLP/HTTP at its standard path, so OTEL_EXPORTER_OTLP_ENDPOINT=<this server> works unchanged.
    path("v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
    path("", include((team_urlpatterns, "teams"))),
    path("", include("traces.urls")),
]

# Our error pages, in the site's layout (arcana_site/errors.py); the CSRF failure view is a setting.
handler400 = "arcana_site.errors.bad_request"
handler403 = "arcana_site.errors.permission_denied"
handler404 = "arcana_site.errors.page_not_found"
handler500 = "arcana_site.errors.server_error"
