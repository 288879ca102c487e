"""The `Conversation` model: conversations run by our Celery workers (issue 12)."""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0007_share_links_notes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Conversation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("run_id", models.CharField(max_length=200)),
                (
                    "mode",
                    models.CharField(
                        choices=[("script", "Script"), ("playground", "Playground")], max_length=12
                    ),
                ),
                ("provider", models.CharField(max_length=100)),
                ("model", models.CharField(max_length=200)),
                ("config", models.JSONField(default=dict)),
                ("script", models.JSONField(default=list)),
                ("cursor", models.PositiveIntegerField(default=0)),
                ("transcript", models.JSONField(default=list)),
                ("state", models.JSONField(blank=True, null=True)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("waiting_for_user", "Waiting For User"),
                            ("completed", "Completed"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="queued",
                        max_length=20,
                    ),
                ),
                ("reason", models.TextField(blank=True)),
                ("cancel_requested", models.BooleanField(default=False)),
                ("tokens_used", models.PositiveBigIntegerField(default=0)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("lease_owner", models.CharField(blank=True, max_length=200)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="conversations",
                        to="traces.project",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["status", "project"], name="conversation_status_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "run_id"), name="conversation_project_run_uniq"
                    )
                ],
            },
        ),
    ]
