"""Template helpers for teams: the header's team switcher and permission checks in templates.

{% load team_ui %}
{% team_switcher %}
{% user_can run.project.team_id "delete_runs" as may_delete %}
"""

from __future__ import annotations

from typing import Any

from django import template

from traces.models import Membership

register = template.Library()


@register.inclusion_tag("traces/_team_switcher.html", takes_context=True)
def team_switcher(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if request is None or user is None or not user.is_authenticated:
        return {"memberships": []}
    from traces.team_views import current_team_id

    memberships = list(Membership.objects.filter(user=user).select_related("team").order_by("team__name"))
    return {"memberships": memberships, "current": current_team_id(request), "request": request}


@register.simple_tag(takes_context=True)
def user_can(context: template.Context, team_id: int, action: str) -> bool:
    """Whether the page's user may do `action` in team `team_id` (the one rule, `Membership.can`)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return False
    membership = Membership.objects.filter(team_id=team_id, user=user).first()
    return membership is not None and membership.can(action)
