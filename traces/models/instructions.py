"""A model's verdict on a lost instruction (issue 35): did an answer given after the context stopped
holding an instruction contradict it?

An `InstructionCheck` names what it checked by ADDRESS, as a score does (project, run id, agent,
turn and step numbers), never by the pk of a projection row a rebuild may make again: the lost
instruction (its text, source, a key that is the same for the same instruction of the same agent,
and the step that first no longer saw it) and the answer checked (its step and its text, copied).
A worker asks the model (`traces/instructions/checking.py`) and writes the verdict —
`contradicts`, `consistent` or `unclear`, with the model's reasoning, provider, model and tokens —
or an error (`failed`: the provider failed or its answer could not be read). Never both.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .teams import Project


class InstructionCheck(models.Model):
    class Verdict(models.TextChoices):
        CONTRADICTS = "contradicts"
        CONSISTENT = "consistent"
        UNCLEAR = "unclear"

    class Status(models.TextChoices):
        QUEUED = "queued"
        DONE = "done"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="instruction_checks")
    run_id = models.CharField(max_length=200)
    agent = models.CharField(max_length=200, blank=True)
    # The lost instruction (traces/instructions/lost.py): its text, where it came from, its key.
    instruction_key = models.CharField(max_length=32)
    instruction = models.TextField()
    source = models.CharField(max_length=20, blank=True)  # "system_prompt" or "user"
    lost_turn = models.PositiveIntegerField()  # the first step that no longer saw it
    lost_step = models.PositiveIntegerField()
    # The answer checked: the agent's last answer at or after that step (None: there was none).
    answer_turn = models.PositiveIntegerField(null=True, blank=True)
    answer_step = models.PositiveIntegerField(null=True, blank=True)
    answer = models.TextField(blank=True)
    # Who checked and what they said.
    provider = models.CharField(max_length=100)  # "scripted" or a name of ARCANA_PROVIDERS
    model = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    verdict = models.CharField(max_length=12, choices=Verdict.choices, blank=True)
    reasoning = models.TextField(blank=True)
    tokens = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # When its task was last sent, and how often: the sweeper sends a check again whose task the
    # broker lost (`traces.instructions.actions.sweep_checks`).
    sent_at = models.DateTimeField(default=timezone.now)
    sends = models.PositiveIntegerField(default=1)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "run_id", "agent"], name="instrcheck_run_idx"),
            models.Index(fields=["status", "sent_at"], name="instrcheck_status_sent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} · {self.instruction[:40]} ({self.verdict or self.status})"

    @property
    def model_label(self) -> str:
        return f"{self.provider}/{self.model}"
