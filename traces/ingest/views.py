"""The uploads page: the caller's recent uploads with their progress, and the upload form for the
roles that may upload."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from traces.core import access
from traces.core.authentication import SignedInRequest
from traces.models import (
    Membership,
    Project,
    Upload,
)

# ---------------------------------------------------------------------------------------------------
# Uploads


@login_required
@require_GET
def uploads(request: SignedInRequest) -> HttpResponse:
    items = list(
        Upload.objects.filter(project__in=access.projects(request)).select_related(
            "project__team", "created_by"
        )[:50]
    )
    ctx: dict[str, Any] = {"uploads": items}
    if request.GET.get("fragment") == "list":
        return render(request, "traces/_uploads_list.html", ctx)
    # Viewers read; only roles that can write get the upload form (one membership row must match both).
    ctx["projects"] = list(
        Project.objects.filter(
            team__memberships__user=request.user,
            team__memberships__role__in=[r for r in Membership.Role.values if r != Membership.Role.VIEWER],
        )
        .select_related("team")
        .order_by("team__name", "slug")
    )
    return render(request, "traces/uploads.html", ctx)
