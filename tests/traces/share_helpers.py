"""Helpers for the share-link tests: the content strings of a real run, and a crawler that follows
every address a shared page links to or polls."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

from django.test import Client

from traces.models import Note, Pin, PrimitiveEvent, Run, Step

# Strings shorter than this are too common to prove anything ("ok", "Paris", "call_1").
MIN_SECRET = 12
CODE = re.compile(r"[a-z0-9_]+")


def _leaves(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value (JSON strings that hold objects are opened too)."""
    if isinstance(value, str):
        yield value
        if value[:1] in "[{":
            try:
                inner = json.loads(value)
            except ValueError:
                return
            if not isinstance(inner, str):
                yield from _leaves(inner)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)


def content_strings(run: Run) -> set[str]:
    """Every message text, model output, prompt snapshot message, pin content, tool argument and
    result, primitive argument and result and note body of `run`, minus what a hide-content link
    keeps on purpose (pin labels and ids, tool and agent names, error categories, run ids, models).
    Error messages and failure reasons count as content: they can quote the input."""
    found: set[str] = set()
    for step in Step.objects.filter(run=run):
        found.update(_leaves(step.assistant_text))
        found.update(_leaves(step.messages))
        snapshot = step.prompt_snapshot if isinstance(step.prompt_snapshot, dict) else {}
        for m in snapshot.get("messages") or []:
            if isinstance(m, dict):
                found.update(_leaves(m.get("content")))
                found.update(_leaves(m.get("tool_calls")))
        for c in step.tool_calls or []:
            found.update(_leaves(c.get("arguments")))
        for r in step.tool_results or []:
            found.update(_leaves([r.get("arguments"), r.get("result"), r.get("error")]))
        found.add(step.failure)
        found.update(e.get("message") or "" for e in step.errors or [] if isinstance(e, dict))
    found.add(run.failure)
    found.update(run.turn_set.values_list("failure", flat=True))
    pins = list(Pin.objects.filter(run=run))
    found.update(p.content for p in pins)
    for ev in PrimitiveEvent.objects.filter(run=run):
        found.update(_leaves([ev.args, ev.result]))
    found.update(Note.objects.filter(run=run).values_list("body", flat=True))
    kept = {p.label for p in pins} | {p.pin_id for p in pins} | {run.run_id, run.model, *(run.agents or [])}
    for step in Step.objects.filter(run=run):
        kept.update(c.get("name") or "" for c in step.tool_calls or [])
        kept.update(r.get("error_category") or "" for r in step.tool_results or [])  # a code, not content
        kept.add(step.model)
    # snake_case codes ("pin_budget_exceeded", "unknown_tool", "assistant_only") are the vocabulary of
    # decisions and outcomes, which a hide-content link keeps; content has spaces or punctuation.
    return {
        s.strip()
        for s in found
        if s and len(s.strip()) >= MIN_SECRET and s.strip() not in kept and not CODE.fullmatch(s.strip())
    }


def leaks(body: str, secrets: set[str]) -> list[str]:
    """The secrets that appear in `body`, as written or HTML-escaped."""
    return [s for s in secrets if s in body or html.escape(s) in body or html.escape(s, quote=False) in body]


_ADDRESS = re.compile(r'(?:href|action|src|data-[a-z-]*url)="([^"]*)"')


def addresses(body: str) -> list[str]:
    """Every address a page links, submits to, loads or polls (href, action, src, data-*-url)."""
    return [html.unescape(a) for a in _ADDRESS.findall(body)]


def crawl(client: Client, start: str, limit: int = 400) -> dict[str, tuple[int, str]]:
    """GET `start` and every same-site page address reachable from it (static files excluded: they
    hold no trace data), with each page's live/fragment URLs. Returns {path?query: (status, body)}."""
    seen: dict[str, tuple[int, str]] = {}
    queue = [start]
    while queue and len(seen) < limit:
        url = queue.pop(0)
        parts = urlsplit(url)
        key = parts.path + (f"?{parts.query}" if parts.query else "")
        if key in seen or parts.path.startswith("/static/"):
            continue
        response = client.get(key)
        body = response.content.decode("utf-8", "replace")
        seen[key] = (response.status_code, body)
        if response.status_code != 200:
            continue
        for a in addresses(body):
            if a.startswith(("#", "mailto:")) or not a:
                continue
            target = urljoin(key, a)
            t = urlsplit(target)
            if t.netloc and t.netloc not in ("testserver",):
                seen[target] = (0, "")  # an off-site link: recorded so the caller fails on it
                continue
            queue.append(t.path + (f"?{t.query}" if t.query else ""))
        # The fidelity range control asks for other windows with ?from=N.
        if 'data-fragment-url="' in body:
            for a in re.findall(r'data-fragment-url="([^"]*)"', body):
                queue.append(html.unescape(a) + ("&" if "?" in a else "?") + "from=1")
    return seen
