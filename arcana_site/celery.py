"""The Celery app. Configured from Django settings (namespace CELERY); tasks live in `traces/tasks.py`."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.settings")

app = Celery("arcana_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
