"""The context band's bars and table rows written in Python (`traces.dashboard.band`): byte for byte
what the template loops they replaced drew, on hostile values; a finished run's band is read from the
cache until the run changes; `escaper` prints a float as the template does."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.template import Context, Template
from django.test import Client
from django.utils.formats import localize
from django.utils.html import conditional_escape
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.traces.views_helpers import HOSTILE_VALUES, OUR_RUN, ingest_samples
from traces.dashboard import band as band_module
from traces.dashboard.composition import PARTS, BandStep, Composition, run_band
from traces.models import Project, Run
from traces.runs.run_page import escaper

# The loops of templates/dashboard/_context_band.html before `traces.dashboard.band`, kept as the
# references the Python rows must match byte for byte.
BARS_REFERENCE = """{% for s in band.steps %}<a href="{{ s.href }}" tabindex="-1">{% for r in s.rects %}<rect class="ctx-part-{{ r.key }}" x="{{ s.x }}" y="{{ r.y }}" width="{{ band.bar }}" height="{{ r.h }}"><title>turn {{ s.turn }} step {{ s.step }}: {{ r.label }} {{ r.tokens }} tokens</title></rect>{% endfor %}</a>{% endfor %}"""  # noqa: E501
ROWS_REFERENCE = """{% load dashboard_ui %}{% for s in band.steps %}<tr><th scope="row"><a href="{{ s.href }}">turn {{ s.turn }} · step {{ s.step }}</a></th>{% for key, label in band.parts %}<td class="num">{{ s.comp.tokens|get_item:key }}</td>{% endfor %}<td class="num">{{ s.comp.total }}</td></tr>{% endfor %}"""  # noqa: E501


RECTS_REFERENCE = """{% for seg in comp.segments %}<rect class="ctx-part-{{ seg.key }}" x="{{ seg.x }}" y="0" width="{{ seg.width }}" height="6"><title>{{ seg.label }}: {{ seg.tokens }} tokens</title></rect>{% endfor %}"""  # noqa: E501
LEGEND_REFERENCE = """{% load dashboard_ui %}{% for seg in comp.segments %}<li><span class="legend__swatch ctx-part-{{ seg.key }}" aria-hidden="true"></span> {{ seg.label }} {{ seg.tokens }} <span class="muted">({{ seg.share|percent }})</span></li>{% endfor %}"""  # noqa: E501


def _band(value: Any) -> dict[str, Any]:
    rect = {"key": value, "y": value, "h": value, "label": value, "tokens": value}
    plain = {"key": "user", "y": 12.25, "h": 3.0, "label": "user", "tokens": 40}
    steps = [
        BandStep(value, value, value, value, Composition({"user": 3, "pins": 2}, "recorded"), [rect, plain]),
        BandStep(1.5, 2, 1, "/r/turns/2#step-1", Composition(dict.fromkeys(dict(PARTS), 1), "recorded"), []),
        BandStep(0.0, 3, 2, "/r?a=<b>", Composition({}, "recorded"), [plain]),
    ]
    return {"steps": steps, "bar": value, "parts": [("user", "user"), (value, value), ("pins", "pins")]}


@pytest.mark.parametrize("value", [*HOSTILE_VALUES, 1, 0.755, 1e-05, 2.5e20, -3.25, 120.0], ids=repr)
def test_the_band_prints_every_value_as_the_template_did(value: Any) -> None:
    band = _band(value)
    for drawn, reference in (
        (band_module.band_bars_html(band), BARS_REFERENCE),
        (band_module.band_rows_html(band), ROWS_REFERENCE),
    ):
        assert drawn == Template(reference).render(Context({"band": band}))
        assert "<script" not in drawn


class _Segments(Composition):
    """A composition whose segments carry `value` in every field (hostile keys, labels and figures)."""

    def __init__(self, value: Any) -> None:
        super().__init__({"user": 3, "tools": 1}, "recorded")
        self.value = value

    def segments(self, width: float = 100.0) -> list[dict[str, Any]]:
        v = self.value
        return [
            *super().segments(width),
            {"key": v, "label": v, "tokens": v, "x": v, "width": v, "share": 0.5},
        ]


@pytest.mark.parametrize("value", [*HOSTILE_VALUES, 1, 0.755, 1e-05, -3.25], ids=repr)
def test_a_steps_bar_prints_every_value_as_the_template_did(value: Any) -> None:
    for comp in (
        _Segments(value),
        Composition({"user": 1, "pins": 3, "tools": 0}, "recorded"),
        Composition({}, ""),
    ):
        for drawn, reference in (
            (band_module.composition_rects_html(comp), RECTS_REFERENCE),
            (band_module.composition_legend_html(comp), LEGEND_REFERENCE),
        ):
            assert drawn == Template(reference).render(Context({"comp": comp}))


def test_an_empty_band_draws_nothing() -> None:
    band = {"steps": [], "bar": 1.0, "parts": []}
    assert band_module.band_bars_html(band) == band_module.band_rows_html(band) == ""


@settings(max_examples=200, deadline=None)
@given(st.floats() | st.integers())
def test_the_escaper_prints_a_number_as_the_template_does(value: float | int) -> None:
    esc = escaper()
    assert esc(value) == conditional_escape(localize(value))
    assert esc(value) == esc(value)  # from the memo too


@pytest.mark.django_db
def test_a_finished_runs_band_is_cached_until_the_run_changes(
    project: Project, alice_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest_samples(project)
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    cache.clear()
    drawn: list[str] = []

    def counted(run: Run, agent: str) -> dict[str, Any] | None:
        drawn.append(agent)
        return run_band(run, agent)

    monkeypatch.setattr(band_module, "run_band", counted)
    first = band_module.fragment_html(run, "")
    band = run_band(run, "")
    assert band is not None and 'id="ctx-band-title"' in first and len(drawn) == 1
    assert band_module.fragment_html(run, "") == first and len(drawn) == 1  # read, not drawn again
    fragment = alice_client.get(run.band_url()).content.decode()
    assert fragment == first and f'href="{band["steps"][0].href}"' in fragment and len(drawn) == 1
    Run.objects.filter(pk=run.pk).update(updated_at=run.updated_at.replace(year=2030))
    run.refresh_from_db()
    assert band_module.fragment_html(run, "") == first and len(drawn) == 2  # the changed run is read again
