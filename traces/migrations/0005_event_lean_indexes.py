"""Event: two fewer indexes to update on every ingested row (see traces/ingest.py, "How fast").

The `(project, run_id, timestamp)` index and the foreign-key index on `project_id` are dropped: the
unique `(project, run_id, step_id)` index serves every lookup by project and run (the read API's event
list sorts a run's rows itself). The foreign-key constraint goes too (the run row written in the same
transaction checks and locks the project); Django's on_delete still deletes a project's events."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0004_message_table"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="event",
            name="event_run_time_idx",
        ),
        migrations.AlterField(
            model_name="event",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="traces.project",
            ),
        ),
    ]
