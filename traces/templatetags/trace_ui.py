"""Template filters for the dashboard. Every filter returns plain text (never a SafeString), so
Django's auto-escaping still applies to whatever trace content passes through them."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import template

register = template.Library()


@register.filter
def pct(value: Any, digits: int = 0) -> str:
    """0.6123 → "61%"; None → "—"."""
    if not isinstance(value, int | float):
        return "—"
    return f"{value * 100:.{digits}f}%"


@register.filter
def pct_width(value: Any) -> str:
    """A utilization as a CSS width, capped at 100 (over-budget turns still draw a full bar)."""
    if not isinstance(value, int | float):
        return "0"
    return f"{max(0.0, min(1.0, value)) * 100:.1f}"


@register.filter
def util_level(value: Any) -> str:
    if not isinstance(value, int | float):
        return ""
    return "over" if value > 1.0 else "high" if value >= 0.75 else ""


@register.filter
def tokens(value: Any) -> str:
    """12345 → "12.3k"; 950 → "950"; 2_500_000 → "2.5M"."""
    if not isinstance(value, int | float):
        return "—"
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{int(value)}"


@register.filter
def duration(value: Any) -> str:
    """Seconds (or a timedelta) → "850 ms", "12.4 s", "3 m 05 s", "2 h 10 m"."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if not isinstance(value, int | float):
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{int(value // 60)} m {int(value % 60):02d} s"
    return f"{int(value // 3600)} h {int(value % 3600 // 60):02d} m"


@register.filter
def short_id(value: Any) -> str:
    text = str(value or "")
    # Head and tail: run ids that share a prefix (sequential ids, test fixtures) stay distinguishable.
    return f"{text[:8]}…{text[-4:]}" if len(text) > 16 else text


def _hidden_size(value: Any) -> int | None:
    """The original size of content a shared page hides (`traces.collab.sharing.Hidden`), else None."""
    size = getattr(value, "size", None) if isinstance(value, str) else None
    return size if isinstance(size, int) else None


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON text (escaped by the template like any other string)."""
    if _hidden_size(value) is not None:  # "[hidden: N chars]" as it is, not as a JSON string
        return str(value)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def content_text(value: Any) -> str:
    """A message's content as text: strings as they are, OpenAI content-part lists joined, else JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(pretty_json(part))
        return "\n".join(parts)
    return pretty_json(value)


@register.filter
def preview(value: Any, length: int = 160) -> str:
    """The first `length` characters of a text on one line, with an ellipsis when cut."""
    text = " ".join(content_text(value).split())
    return text if len(text) <= length else text[: length - 1] + "…"


@register.filter
def is_long(value: Any, limit: int = 600) -> bool:
    return len(content_text(value)) > limit


@register.filter
def char_count(value: Any) -> int:
    hidden = _hidden_size(value)
    return hidden if hidden is not None else len(content_text(value))


@register.filter
def get(mapping: Any, key: str) -> Any:
    """`mapping|get:"key"` for keys a template cannot spell (or dicts with odd shapes)."""
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def tool_name(tool: Any) -> str:
    """The name of an OpenAI function-tool dict (or of a flat {name: …} one)."""
    if isinstance(tool, dict):
        fn = tool.get("function")
        if isinstance(fn, dict) and fn.get("name"):
            return str(fn["name"])
        if tool.get("name"):
            return str(tool["name"])
    return "?"


@register.filter
def as_args(value: Any) -> str:
    """Tool-call arguments (a JSON string or a dict) as indented JSON text."""
    if isinstance(value, str):
        try:
            return pretty_json(json.loads(value))
        except ValueError:
            return value
    return pretty_json(value)


@register.filter
def budget_ratio(decision: Any) -> float | None:
    """budget_used / budget_total of a context decision (None when either is unknown)."""
    used = getattr(decision, "budget_used", None)
    total = getattr(decision, "budget_total", None)
    if not isinstance(used, int) or not isinstance(total, int) or total <= 0:
        return None
    return used / total


@register.filter
def turn_url(run: Any, number: Any) -> str:
    """`{{ run|turn_url:n }}`: the page of turn n of `run` (a template cannot pass arguments to
    `Run.turn_url`). The URL is plain text, so auto-escaping still applies in attributes."""
    return str(run.turn_url(int(number)))


@register.filter
def turn_live_url(run: Any, number: Any) -> str:
    """`{{ run|turn_live_url:n }}`: the steps fragment turn n's page polls while the run is live."""
    return str(run.turn_live_url(int(number)))


@register.filter
def pct_class(value: Any) -> str:
    """A utilization as a width class, `pct-0` … `pct-100` (static/css/base.css), capped at 100: the
    Content-Security-Policy allows no inline `style=` attribute, so bar widths are classes."""
    if not isinstance(value, int | float):
        return "pct-0"
    return f"pct-{round(max(0.0, min(1.0, value)) * 100)}"
