"""ContextDecision: message decisions move from a jsonb array of objects to one compact columnar JSON
text per decision (`message_table`; see the ContextDecision docstring for why). Existing rows are
converted in place, both ways."""

from __future__ import annotations

import json
from typing import Any

from django.db import migrations, models

KEYS = [
    "index", "role", "outcome", "fidelity", "relevance_score", "token_count_before", "token_count_after",
    "reason", "pinned", "pin_id",
]  # fmt: skip
HEAD = '{"cols":' + json.dumps(KEYS, separators=(",", ":")) + ',"rows":'
EMPTY = HEAD + "[]}"


def _pack(decisions: Any) -> str:
    rows = [[d.get(k) for k in KEYS] for d in decisions or [] if isinstance(d, dict)]
    return HEAD + json.dumps(rows, ensure_ascii=False, separators=(",", ":")) + "}"


def forwards(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("traces", "ContextDecision")
    batch = []
    for obj in model.objects.only("id", "message_decisions").iterator(chunk_size=500):
        obj.message_table = _pack(obj.message_decisions)
        batch.append(obj)
        if len(batch) >= 500:
            model.objects.bulk_update(batch, ["message_table"])
            batch = []
    model.objects.bulk_update(batch, ["message_table"])


def backwards(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("traces", "ContextDecision")
    batch = []
    for obj in model.objects.only("id", "message_table").iterator(chunk_size=500):
        value = json.loads(obj.message_table or EMPTY)
        obj.message_decisions = [dict(zip(value["cols"], row, strict=False)) for row in value["rows"]]
        batch.append(obj)
        if len(batch) >= 500:
            model.objects.bulk_update(batch, ["message_decisions"])
            batch = []
    model.objects.bulk_update(batch, ["message_decisions"])


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0003_step_tool_results"),
    ]

    operations = [
        migrations.AddField(
            model_name="contextdecision",
            name="message_table",
            field=models.TextField(default=EMPTY),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(
            model_name="contextdecision",
            name="message_decisions",
        ),
    ]
