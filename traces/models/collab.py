"""Share links and review notes."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .runs import Run
from .teams import Action, Membership, Project


class ShareLinkQuerySet(models.QuerySet["ShareLink"]):
    def usable(self) -> ShareLinkQuerySet:
        """Links that open a page now: not revoked, not expired."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


class ShareLink(models.Model):
    """A read-only URL to one run, for someone outside the team (DESIGN.md §6, §8).

    The token (`secrets.token_urlsafe(32)`, 256 bits) is shown once, when the link is issued; only its
    sha256 is stored, so a database leak opens nothing and lookup by hash never compares secrets
    byte by byte in Python. `hide_content` links show the run's structure with every content string
    replaced by its size (`traces.collab.sharing` is the one place that does it)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="share_links")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="share_links")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)  # first characters of the token, to tell links apart
    hide_content = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        # The run's id (`run.run_id`), not `run_id`: that attribute is the foreign key, an internal row id.
        return f"share link {self.prefix}… to {self.run.run_id}"

    @staticmethod
    def hash_token(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return not self.is_revoked and not self.is_expired

    @property
    def state(self) -> str:
        """ "active", "revoked" or "expired", for lists."""
        return "revoked" if self.is_revoked else "expired" if self.is_expired else "active"


class Note(models.Model):
    """A review note on a run, one of its turns, or one step's context decision (`turn_number` and
    `step_number` None for the run / the turn as a whole), labelled and resolvable."""

    class Label(models.TextChoices):
        BUG = "bug"
        EXPECTED = "expected"
        QUESTION = "question"

    BODY_MAX = 5000

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="notes")
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField(null=True, blank=True)
    step_number = models.PositiveIntegerField(null=True, blank=True)
    label = models.CharField(max_length=10, choices=Label.choices, default=Label.QUESTION)
    body = models.TextField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    edited_at = models.DateTimeField(null=True, blank=True)  # the last change of label or body

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "turn_number"], name="note_run_turn_idx")]

    def __str__(self) -> str:
        return f"{self.label} note on {self.run.run_id} {self.target_label}"

    @property
    def is_resolved(self) -> bool:
        return self.resolved_at is not None

    # Who may change a note: the one rule for the pages, the API and the templates. `membership` is
    # the caller's membership of the note's team (`membership_of`), None for anyone else: outsiders,
    # removed members, anonymous callers and API keys (a key is no member and never an author).

    def can_edit(self, membership: Membership | None) -> bool:
        """The author may edit their note's label and body while they may write notes in the team
        (not after being made a viewer or removed). A note without an author (written with an API key,
        or whose author's account is gone) is edited by nobody.

        >>> Note(author_id=7).can_edit(Membership(user_id=7, role="member"))
        True
        >>> Note(author_id=7).can_edit(Membership(user_id=7, role="viewer"))
        False
        >>> Note(author_id=7).can_edit(Membership(user_id=8, role="owner")), Note().can_edit(None)
        (False, False)
        """
        return (
            membership is not None
            and membership.can(Action.NOTE)
            and self.author_id is not None
            and self.author_id == membership.user_id
        )

    def can_delete(self, membership: Membership | None) -> bool:
        """The author (as for `can_edit`), or any admin or owner of the team (moderation).

        >>> Note(author_id=7).can_delete(Membership(user_id=8, role="admin"))
        True
        >>> Note(author_id=7).can_delete(Membership(user_id=8, role="member"))
        False
        """
        if membership is None:
            return False
        return self.can_edit(membership) or membership.role_at_least(Membership.Role.ADMIN)

    @property
    def target_label(self) -> str:
        """ "run", "turn 3" or "turn 3 step 2" (with the agent of a pool)."""
        who = f"{self.agent} " if self.agent else ""
        if self.turn_number is None:
            return "run"
        if self.step_number is None:
            return f"{who}turn {self.turn_number}"
        return f"{who}turn {self.turn_number} step {self.step_number}"
