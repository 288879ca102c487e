from __future__ import annotations

from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "traces"
    verbose_name = "Traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # System checks, and the worker heartbeat signals (connected in every process; they fire only in workers).
        from traces import checks  # noqa: F401
        from traces.scores import dashboard_section  # noqa: F401  (the dashboard's scores section)
