"""The turn page's step parts (`_turn_step_head.html`, `_turn_step_comp.html`, `_turn_step_tail.html`),
drawn once per run state.

A step's header, what filled its context, context decision, decision table, prompt snapshot, output and
primitive calls come from the run's projections only; what depends on the reader (its cost, over the
project's prices; notes, note forms and their CSRF token) sits between the parts in `_turn_steps.html`
and is drawn on every request. A finished run's step view carries `part_key`
(`traces.runs.turn_page.cache_key`: the run's primary key, project, id, `updated_at`, agent and turn);
the parts are cached under it together with whether the page is shared and whether its content is
hidden, since `traces.collab.sharing.redact` changes what they show. A step view without `part_key`
(a run that is updating) is drawn afresh every time.
"""

from __future__ import annotations

from django import template
from django.core.cache import cache
from django.utils.safestring import SafeString

from traces.runs.turn_page import TURN_CACHE_SECONDS

register = template.Library()

PARTS = ("head", "comp", "tail")


@register.simple_tag(takes_context=True)
def turn_step_part(context: template.Context, name: str) -> SafeString:
    """`traces/_turn_step_<name>.html` drawn with the page's context (its `sv`, `step`, `decision`).

    A turn's drawn parts share one cache entry per kind of page (team, open share, hidden share), so
    a turn view adds two entries to the cache whatever its number of steps. The entry is read once a
    view and written once, after the last step's last part (kept meanwhile in the template's render
    context): each read or write is the whole turn's markup through the cache's pickling."""
    if name not in PARTS:
        raise template.TemplateSyntaxError(f"turn_step_part: no part {name!r}")
    sv = context.get("sv") or {}
    turn_key = sv.get("part_key")
    if not turn_key:
        return _draw(context, name)
    key = f"{turn_key}:drawn:{int(bool(context.get('shared')))}:{int(bool(context.get('hide_content')))}"
    part = f"{sv['step'].pk}:{sv['step'].number}:{name}"
    state = context.render_context.get(f"turn_step_part:{key}")
    if state is None:
        cached = cache.get(key)
        state = {"drawn": cached if isinstance(cached, dict) else {}, "new": False}
        context.render_context[f"turn_step_part:{key}"] = state
    found = state["drawn"].get(part)
    if isinstance(found, SafeString):  # only what the auto-escaping template below drew
        html = found
    else:
        html = state["drawn"][part] = _draw(context, name)
        state["new"] = True
    steps = context.get("steps")
    last = not isinstance(steps, list) or not steps or steps[-1] is sv
    if state["new"] and name == PARTS[-1] and last:
        cache.set(key, state["drawn"], TURN_CACHE_SECONDS)
        state["new"] = False
    return html


def _draw(context: template.Context, name: str) -> SafeString:
    assert context.template is not None
    return context.template.engine.get_template(f"traces/_turn_step_{name}.html").render(context)
