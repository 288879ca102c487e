"""WSGI entry point (gunicorn arcana_site.wsgi).

Loading also imports every view (through the URLconf) and then freezes what is loaded out of the cyclic
garbage collector (`gc.freeze`): the ~100,000 objects of Django, DRF and our code live as long as the
process, yet each full collection walked them all — 60–100 ms of CPU on a small machine, paid by
whichever request triggered it (a 500-event batch triggers one every few requests). Frozen objects
are still freed by reference counting; only the collector stops visiting them. Under
`gunicorn --preload` the freeze happens before the fork, which also keeps those pages shared.

A request body with a Content-Length is read through `arcana_site.wsgi_input.LengthInput`: gunicorn's
own `wsgi.input` gathers it 1 KB at a time (0.5 ms of CPU for a 500-event ingest batch).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

from arcana_site.wsgi_input import with_length_input

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.settings")
django_application = get_wsgi_application()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Django's WSGI application, its request body read through `LengthInput` under gunicorn."""
    return django_application(with_length_input(environ), start_response)


def freeze_loaded_code() -> None:
    """Import what the first request would (the URLconf and its views), collect once, then freeze."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every URL module and view)
    gc.collect()
    gc.freeze()


freeze_loaded_code()
