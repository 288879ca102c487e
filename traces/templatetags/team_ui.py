"""Template helpers for teams: the header's team switcher and permission checks in templates.

{% load team_ui %}
{% team_switcher %}
{% user_can run.project.team_id "delete_runs" as may_delete %}
"""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.inclusion_tag("traces/_team_switcher.html", takes_context=True)
def team_switcher(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if request is None or user is None or not user.is_authenticated:
        return {"memberships": []}
    from traces.teams.views import current_team_id, memberships_of

    return {"memberships": memberships_of(request), "current": current_team_id(request), "request": request}


@register.simple_tag(takes_context=True)
def user_can(context: template.Context, team_id: int, action: str) -> bool:
    """Whether the page's user may do `action` in team `team_id` (the one rule, `Membership.can`)."""
    from traces.teams.views import memberships_of

    request = context.get("request")
    if request is None:
        return False
    membership = next((m for m in memberships_of(request) if m.team_id == team_id), None)
    return membership is not None and membership.can(action)
