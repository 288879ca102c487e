"""`Branch`: a step of a run re-run from an edited context (issue 38), and the run it made.

A branch names the original run (a foreign key: deleting the run deletes its branches), the step
(agent, turn, step), the edits (`runtime.rerun.Edit` dicts), the provider and model, and the branch
run by `(project, branch_run_id)` — that run is a projection `traces.ingest` creates from the
branch's events, which say where they branched from (`metadata.branch`). The worker task is
`traces.tasks.rerun_step`; the actions are in `traces/branches/`.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .runs import Run
from .teams import Project


class Branch(models.Model):
    """One re-run of one step: `queued` → `running` → `completed` / `failed` (`error` says why). A
    row `running` since long before any model call could end lost its worker: a redelivered task
    claims it again (`traces.branches.worker.claim`)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"

    FINISHED = (Status.COMPLETED, Status.FAILED)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="branches")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="branches")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField()
    step_number = models.PositiveIntegerField()
    branch_run_id = models.CharField(max_length=200)
    edits = models.JSONField(default=list)
    provider = models.CharField(max_length=100)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)  # the worker claimed it (the last time)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "branch_run_id"], name="branch_project_run_uniq")
        ]
        indexes = [
            models.Index(fields=["run", "agent", "turn_number", "step_number"], name="branch_step_idx")
        ]

    def __str__(self) -> str:
        return f"branch {self.pk} of {self.run_id} turn {self.turn_number} step {self.step_number}"

    def get_absolute_url(self) -> str:
        """The branch's status page (polls until the re-run is done, then links to the compare page)."""
        return reverse("traces:branch", kwargs={"project_id": self.project_id, "branch_id": self.pk})

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def branch_run(self) -> Run | None:
        """The run the re-run wrote (None until its events are stored)."""
        cached = self.__dict__.get("_branch_run")
        if cached is None:
            cached = Run.objects.filter(project_id=self.project_id, run_id=self.branch_run_id).first()
            self.__dict__["_branch_run"] = cached
        return cached

    def compare_url(self) -> str:
        """The compare page of the original run and the branch, on the re-run turn."""
        from urllib.parse import urlencode

        query = {
            "a": f"{self.project_id}:{self.run.run_id}",
            "b": f"{self.project_id}:{self.branch_run_id}",
            "turn": str(self.turn_number),
        }
        if self.agent:
            query["agent_a"] = query["agent_b"] = self.agent
        return reverse("traces:compare") + "?" + urlencode(query)

    def step_label(self) -> str:
        who = f"{self.agent} " if self.agent else ""
        return f"{who}turn {self.turn_number} step {self.step_number}"
