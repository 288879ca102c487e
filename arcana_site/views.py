"""Site-wide views that belong to no app."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection


def _check_database() -> dict[str, object]:
    started = time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"; the message says which
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "vendor": connection.vendor, "ms": round((time.monotonic() - started) * 1000, 1)}


def _check_broker() -> dict[str, object]:
    started = time.monotonic()
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    try:
        with Connection(settings.CELERY_BROKER_URL, transport_options=options, connect_timeout=2) as conn:
            # One attempt, short timeout: a health probe must answer quickly even when the broker is gone.
            conn.ensure_connection(max_retries=1, timeout=2)
            transport = conn.transport_cls
            if transport == "filesystem":
                # The file-system transport "connects" to anything; what matters is a writable queue folder.
                folder = Path(options["data_folder_out"])
                if not (folder.is_dir() and os.access(folder, os.W_OK)):
                    raise OSError(f"broker folder {folder} is missing or not writable")
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "transport": str(transport), "ms": round((time.monotonic() - started) * 1000, 1)}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Database and broker status as JSON; 503 when either is down (for load balancers and CI)."""
    checks = {"database": _check_database(), "broker": _check_broker()}
    ok = all(check["ok"] for check in checks.values())
    # Workers are reported, not required: a web node answers requests (and queues work) while the
    # workers restart, so their absence must not take it out of a load balancer.
    workers = _workers_seen() if checks["database"]["ok"] else {}
    return JsonResponse(
        {"status": "ok" if ok else "unavailable", **checks, "workers": workers}, status=200 if ok else 503
    )


def _workers_seen() -> dict[str, object]:
    from traces.core.workers import SEEN_WITHIN_SECONDS, workers_by_queue

    try:
        queues = workers_by_queue()
    except Exception as exc:  # e.g. migrations not applied yet
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        "seen_within_seconds": SEEN_WITHIN_SECONDS,
        "queues": {queue: {"count": len(names), "names": names} for queue, names in queues.items()},
    }


@require_GET
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """`/favicon.ico`, asked by clients that do not read the page's icon link: the same mark."""
    return HttpResponseRedirect(static("img/favicon.svg"))
