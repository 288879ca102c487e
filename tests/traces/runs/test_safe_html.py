"""No trace string is marked safe (DESIGN.md §8): nothing in `traces/` calls `mark_safe` or builds a
`SafeString`; the pages' markup written in Python goes through `format_html` (which escapes every
argument), and a hostile string in every field those lists and tables print comes out escaped on the
run page, the turn page and a share link's pages, drawn and from the cache."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.core.cache import cache
from django.test import Client

from tests.traces.views_helpers import decision, envelope, our_step
from traces.collab import sharing
from traces.ingest import ingest_events
from traces.models import Project, Run

ROOT = Path(__file__).resolve().parents[3]

#: Names that turn a string into markup the templates print as it is.
MARKING = {"mark_safe", "SafeString", "SafeText", "SafeData", "mark_for_escaping", "html_safe"}


def _marking_uses(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in MARKING:
                found.append((node.lineno, f"{name}(…)"))
            # A format whose text is computed from values would print them unescaped.
            if name in ("format_html", "format_html_join") and node.args:
                fmt = (
                    node.args[0 if name == "format_html" else 1]
                    if len(node.args) > 1 or name == "format_html"
                    else None
                )
                if isinstance(fmt, ast.JoinedStr) or (
                    isinstance(fmt, ast.Call)
                    and isinstance(fmt.func, ast.Attribute)
                    and fmt.func.attr == "format"
                ):
                    found.append((node.lineno, f"{name} with a computed format"))
        elif isinstance(node, ast.FunctionDef) and node.name == "__html__":
            found.append((node.lineno, "__html__ (markup in disguise)"))
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                base_name = (
                    base.id
                    if isinstance(base, ast.Name)
                    else base.attr
                    if isinstance(base, ast.Attribute)
                    else ""
                )
                if base_name in MARKING:
                    found.append((node.lineno, f"class based on {base_name}"))
        elif isinstance(node, ast.keyword) and isinstance(node.value, ast.Name) and node.value.id in MARKING:
            found.append((node.value.lineno, f"{node.value.id} as a value"))  # default_factory=SafeString
    return found


def test_nothing_in_traces_marks_a_string_safe() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "traces").rglob("*.py"))
        for line, what in _marking_uses(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == []


def test_no_template_turns_off_escaping() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "templates").rglob("*.html"))
        if any(s in path.read_text(encoding="utf-8") for s in ("|safe", "autoescape off", "|safeseq"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "source",
    [
        "from django.utils.safestring import mark_safe\nx = mark_safe(y)\n",
        "import django.utils.safestring as s\nx = s.SafeString(y)\n",
        "x = field(default_factory=SafeString)\n",
        "class M(str):\n    def __html__(self):\n        return self\n",
        "class M(SafeString):\n    pass\n",
        "x = format_html(f'<b>{y}</b>')\n",
        "x = format_html('<b>{}</b>'.format(y))\n",
    ],
)
def test_the_scan_finds_each_way_of_marking(source: str) -> None:
    assert _marking_uses(ast.parse(source))


# ---------------------------------------------------------------------------------------------------
# Hostile strings on the pages

H = '"onmouseover="alert(1)"><script>alert(2)</script></textarea><b>'
RAW = ('"onmouseover=', "<script>alert(2)", "</textarea><b>")
ESCAPED = "&quot;onmouseover=&quot;alert(1)&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;&lt;/textarea&gt;&lt;b&gt;"
AGENT = "ag" + H


def _hostile_run(project: Project, run_id: str = "xss-run") -> Run:
    """Two turns of an agent named with markup, whose every decision field, strategy, explanation, pin
    label and id, recall argument and failure reason carries `H`; outcomes change between the steps, so
    "what changed" lists them."""
    events: list[dict[str, Any]] = []
    pin_id = "p_" + H
    for turn, outcome in ((1, "kept"), (2, "compressed")):
        rows = [
            {**decision(0, "system"), "role": H, "reason": H},
            {**decision(1, H, outcome=outcome, fidelity=H), "reason": H},
            {**decision(2, "system"), "reason": "pinned", "pinned": True, "pin_id": pin_id},
            {**decision(3, "user", outcome=H, fidelity=None), "reason": H},
        ]
        step = our_step(run_id, turn, 1, decisions=rows, text=H, finish="tool_calls" if turn == 1 else "stop")
        cd, answer = step[0]["metadata"], step[1]["metadata"]
        cd["context_decision"]["strategy"] = H
        cd["context_decision"]["explanation"] = cd["explanation"] = H
        answer["assessment"] = {"completed": False, "failed": True, "completion_reason": H}
        for ev in step:
            ev["metadata"]["source_agent"] = AGENT
        events += step
        primitive = ("pin", {"content": H, "label": H}, {"pinned": True, "pin_id": pin_id, "label": H})
        if turn == 2:
            primitive = ("recall", {"turn": 1, "query": H}, {"turn": 1, "found": False, "note": H})
        events.append(
            envelope(
                run_id,
                "cognitive_primitive",
                {
                    "producer": "arcana-console",
                    "turn": turn,
                    "step": 1,
                    "source_agent": AGENT,
                    "primitive": primitive[0],
                    "args": primitive[1],
                    "result": primitive[2],
                    "tool_call_id": f"call_{turn}",
                    "tokens": 30,
                },  # fmt: skip
                parent_step_id=step[1]["step_id"],
                timestamp=step[1]["timestamp"],
            )
        )
    ingest_events(project, events, source="api")
    run = Run.objects.get(project=project, run_id=run_id)
    assert AGENT in run.agents and not run.is_updating
    return run


def _inert(html: str, page: str) -> None:
    # The fidelity map's columns are data for static/js (`json_script`): JSON in a script element that
    # never runs, with `<`, `>` and `&` written as \\u escapes, so its quotes are the JSON's own.
    data = re.findall(r'<script id="[^"<>]*" type="application/json">(.*?)</script>', html, flags=re.S)
    assert all("<" not in body and ">" not in body for body in data), page
    html = re.sub(r'<script id="[^"<>]*" type="application/json">.*?</script>', "", html, flags=re.S)
    for raw in RAW:
        assert raw not in html, (page, raw)
    assert ESCAPED in html, page


def _pages(run: Run) -> list[str]:
    q = f"?agent={quote(AGENT)}"
    return [run.get_absolute_url() + q, str(run.turn_url(1)) + q, str(run.turn_url(2)) + q]


def test_a_hostile_string_in_every_field_comes_out_escaped(
    project: Project, alice: Any, alice_client: Client
) -> None:
    run = _hostile_run(project)
    _, token = sharing.do_create_share_link(run, alice)
    shared = sharing.bind_run_to_share(run, token)
    anonymous = Client()
    views = [(alice_client, url) for url in _pages(run)] + [(anonymous, url) for url in _pages(shared)]
    assert any("/s/" in url for _, url in views)
    cache.clear()
    for attempt in ("drawn", "cached"):
        for client, url in views:
            response = client.get(url)
            assert response.status_code == 200, url
            html = response.content.decode()
            _inert(html, f"{attempt} {url}")
            if "/turns/2" in url:
                assert "What changed since" in html and "Per-message decisions" in html
            elif "/turns/" not in url:
                for part in ('class="fmap-cells"', "pin-lane", "table--compact cognitive", "timeline"):
                    assert part in html, (url, part)
