"""The Django admin, for operators (staff users) of an installation.

Teams, memberships and projects can be edited here; everything that records what happened (trace
rows, uploads, audit entries) is read-only, because trace rows have one writer (`traces.ingest`) and
audit rows are written by the action they record. API keys are read-only too, with one action:
revoke. Team members use the product's own settings pages; the admin is for the people who run it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from traces.models import ApiKey, Membership, Project, Run, Team, Upload


class ReadOnlyAdmin(admin.ModelAdmin):
    """Lists and shows rows; adds, changes and deletes nothing."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "team", "created_at"]
    list_filter = ["team"]
    search_fields = ["slug", "name"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "name", "project", "created_by", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["project__team"]
    search_fields = ["prefix", "name"]
    exclude = ["key_hash"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected keys (effective on their next request)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        keys = [key for key in queryset if key.revoked_at is None]
        for key in keys:
            key.revoke()
        self.message_user(request, f"Revoked {len(keys)} key(s).")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Needed for the revoke action to be offered; the form itself shows no editable field.
        return obj is None and request.user.is_staff


@admin.register(Upload)
class UploadAdmin(ReadOnlyAdmin):
    list_display = ["id", "original_name", "project", "status", "lines_done", "rejected", "created_at"]
    list_filter = ["status", "project__team"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "project", "status", "turns", "steps", "events", "started_at"]
    list_filter = ["status", "source", "project__team"]
    search_fields = ["run_id"]
    show_full_result_count = False  # counting every run on each page view is slow on big stores
