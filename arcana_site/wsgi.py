"""WSGI entry point (gunicorn arcana_site.wsgi).

Loading also imports every view (through the URLconf) and then freezes what is loaded out of the cyclic
garbage collector (`gc.freeze`): the ~100,000 objects of Django, DRF and our code live as long as the
process, yet each full collection walked them all — 60–100 ms of CPU on a small machine, paid by
whichever request triggered it (a 500-event batch triggers one every few requests). Frozen objects
are still freed by reference counting; only the collector stops visiting them. Under
`gunicorn --preload` the freeze happens before the fork, which also keeps those pages shared.
"""

from __future__ import annotations

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.settings")
application = get_wsgi_application()


def freeze_loaded_code() -> None:
    """Import what the first request would (the URLconf and its views), collect once, then freeze."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every URL module and view)
    gc.collect()
    gc.freeze()


freeze_loaded_code()
