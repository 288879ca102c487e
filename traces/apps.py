from __future__ import annotations

from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from traces import checks  # noqa: F401  (registers the system checks)
