"""Projection tables: no separate index on `run_id`. Each table already has a composite index or unique
constraint that starts with `run` (turn, step, pin: their unique keys; decision and primitive event:
`(run, agent, turn_number)`), which serves every lookup and delete by run; one index fewer per row."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0005_event_lean_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="contextdecision",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="decisions",
                to="traces.run",
            ),
        ),
        migrations.AlterField(
            model_name="pin",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="pins",
                to="traces.run",
            ),
        ),
        migrations.AlterField(
            model_name="primitiveevent",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="primitive_events",
                to="traces.run",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="step_set",
                to="traces.run",
            ),
        ),
        migrations.AlterField(
            model_name="turn",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="turn_set",
                to="traces.run",
            ),
        ),
    ]
