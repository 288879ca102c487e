"""Requests are handled with Python's cyclic garbage collector paused, and it runs again afterwards,
whatever the view did (arcana_site/collector.py)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.signals import template_rendered

from arcana_site.collector import CollectorPausedMiddleware


@pytest.mark.django_db
def test_a_page_is_rendered_with_the_collector_paused_and_left_on() -> None:
    seen: list[bool] = []

    def rendered(**kwargs: Any) -> None:
        seen.append(gc.isenabled())

    template_rendered.connect(rendered)
    try:
        assert gc.isenabled()
        response = Client().get("/accounts/login/")
    finally:
        template_rendered.disconnect(rendered)
    assert response.status_code == 200
    assert seen and not any(seen)  # every template of the page
    assert gc.isenabled()


def test_it_is_the_outermost_middleware() -> None:
    """Outermost, so that the other middleware's work and the response's rendering are inside it."""
    assert settings.MIDDLEWARE[0] == "arcana_site.collector.CollectorPausedMiddleware"


def test_the_collector_runs_again_after_a_view_that_raises_and_stays_paused_when_paused_before() -> None:
    def failing(request: HttpRequest) -> HttpResponse:
        assert not gc.isenabled()
        raise RuntimeError("a view's bug")

    with pytest.raises(RuntimeError):
        CollectorPausedMiddleware(failing)(HttpRequest())
    assert gc.isenabled()
    gc.disable()  # paused by someone else: left as it is
    try:
        assert CollectorPausedMiddleware(lambda r: HttpResponse("ok"))(HttpRequest()).status_code == 200
        assert not gc.isenabled()
    finally:
        gc.enable()
