"""Uploads, files stored in the database, and worker heartbeats."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .teams import Project


class Upload(models.Model):
    """A JSONL file to ingest, processed by the `process_upload` task in chunks with progress."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="uploads")
    file = models.FileField(upload_to="uploads/%Y/%m/%d/", max_length=300)
    original_name = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    bytes = models.PositiveBigIntegerField(default=0)
    lines_total = models.PositiveIntegerField(null=True, blank=True)  # known once the file is read
    lines_done = models.PositiveIntegerField(default=0)
    accepted = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    # [{"line": n, "field"?: "...", "message": "..."}] (runtime.errors.ErrorDetail; older rows: "error"), capped
    line_errors = models.JSONField(default=list)
    runs = models.JSONField(default=list)  # run ids the file touched, sorted
    error = models.TextField(blank=True)  # why a failed upload failed as a whole
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    api_key = models.ForeignKey("ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Work survives a dead worker (DESIGN.md §7). A `running` row is held under a lease: the worker
    # named `lease_owner` renews `lease_expires_at` with every chunk it commits; a row whose lease
    # expired lost its worker and is claimed again from its cursor (`lines_done`). `queued_at` is
    # when a task was last enqueued for a `queued` row (a row left queued while the broker was down is
    # enqueued again by the sweeper); `attempts` counts claims, so a file that kills every worker
    # that reads it ends `failed` instead of looping.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The sweeper's scan: unfinished uploads only.
            models.Index(
                fields=["status"],
                name="upload_unfinished_idx",
                condition=models.Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"upload {self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def progress(self) -> float | None:
        """0..1 once the number of lines is known."""
        if not self.lines_total:
            return 1.0 if self.status == self.Status.DONE else None
        return min(1.0, self.lines_done / self.lines_total)


class StoredFile(models.Model):
    """A file kept in the database by `traces.core.storage.DatabaseStorage` (ARCANA_STORAGE=database), so
    web nodes and workers on different machines read the same uploads."""

    name = models.CharField(max_length=300, unique=True)
    size = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes)"


class StoredFileChunk(models.Model):
    """One chunk (`traces.core.storage.CHUNK_BYTES`) of a `StoredFile`, in order of `index`."""

    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["file", "index"], name="storedfilechunk_file_index_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.file_id}#{self.index}"


class WorkerHeartbeat(models.Model):
    """A Celery worker that is alive: written by the worker itself every `traces.core.workers.BEAT_SECONDS`,
    read by /healthz to report the workers seen per queue (on any machine: they share the database)."""

    hostname = models.CharField(max_length=300, unique=True)  # celery's node name, e.g. arcana-12@web1
    queues = models.JSONField(default=list)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.hostname} {self.queues}"
