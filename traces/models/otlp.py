"""OpenTelemetry spans as received: the source of truth of a run sent over OTLP (DESIGN.md §10)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .teams import Project


class Span(models.Model):
    """One span of an OTLP/HTTP export, keyed by `(project, trace_id, span_id)`: a span sent again is
    stored once. `body` is the span as decoded from the request (`runtime.otlp.Span`: ids, name, times,
    status, every attribute, event and link, its resource and scope) as compact JSON, kept in its row
    on PostgreSQL up to 8,160 bytes (compressed with lz4 past that); rows stored before that hold
    zlib-compressed JSON, read alike.

    The run a span belongs to is a reading of the spans (`runtime.otlp.group_runs`): `conversation`
    holds the conversation or session id the span itself carries ("" when it carries none, and then
    its trace decides), `run_id` the run it was last projected into ("" while its run is not derived
    yet: pending). Both are there to find the spans of a run again; the run's events and projections
    are derived from the bodies (`traces.ingest.spans`).
    """

    # No index of its own and no database constraint (ingest speed, bench/otlp.py), as `Event`: the
    # three indexes below lead with the project; the store locks the project row for its transaction
    # (`traces.ingest.spans`), and deleting a project still deletes its spans (Django's on_delete).
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="spans", db_index=False, db_constraint=False
    )
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    conversation = models.CharField(max_length=200, blank=True, default="")
    run_id = models.CharField(max_length=200, blank=True, default="")
    received_at = models.DateTimeField(default=timezone.now)
    body = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "trace_id", "span_id"], name="span_project_trace_span_uniq"
            )
        ]
        indexes = [
            models.Index(fields=["project", "conversation"], name="span_conversation_idx"),
            models.Index(fields=["project", "run_id"], name="span_run_idx"),
            # The spans no run holds yet (pending derivation), for the sweeper.
            models.Index(fields=["received_at"], condition=models.Q(run_id=""), name="span_pending_idx"),
        ]

    def __str__(self) -> str:
        return f"span {self.trace_id}/{self.span_id}"
