"""The Django project of Arcana Console: settings, urls, the Celery app, wsgi/asgi."""

from __future__ import annotations

from arcana_site.celery import app as celery_app

__all__ = ["celery_app"]
