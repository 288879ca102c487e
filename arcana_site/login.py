"""Login throttling (DESIGN.md §8): repeated failed sign-ins lock out the username AND the address.

* `ARCANA_LOGIN_MAX_FAILURES_PER_USER` failures (default 5) for one username within
  `ARCANA_LOGIN_WINDOW_SECONDS` (default 900) lock that username, from every address;
* `ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS` failures (default 20) from one address lock that address,
  for every username (one client guessing across many accounts).

Failures are rows of `traces.LoginFailure`, so every gunicorn worker and machine counts the same ones
(the embedded set-up has no Redis). The lock is enforced by the authentication backend, so every
password form (our login page, the admin's) obeys it; our login page also says why, with status 429.
While locked, attempts are refused without checking the password and are not counted, so the lock ends
`window` seconds after the failures that caused it; a successful sign-in clears its username's failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from traces.models import LoginFailure


@dataclass(frozen=True)
class Lock:
    """Why sign-in is refused, and for how many more seconds."""

    reason: str  # "user" or "address"
    retry_after: int

    @property
    def message(self) -> str:
        minutes = max(1, math.ceil(self.retry_after / 60))
        who = "this account" if self.reason == "user" else "your network address"
        return (
            f"Too many failed sign-ins for {who}. For your security, sign-in is locked: "
            f"try again in {minutes} minute{'s' if minutes != 1 else ''}."
        )


def client_address(request: HttpRequest | None) -> str:
    """The client's address as the server sees it (REMOTE_ADDR: a proxy in front must pass it on)."""
    if request is None:
        return ""
    return str(request.META.get("REMOTE_ADDR") or "")[:64]


def _norm(username: Any) -> str:
    return str(username or "").replace("\x00", "").strip().lower()[:150]


def _window() -> timedelta:
    return timedelta(seconds=int(settings.ARCANA_LOGIN_WINDOW_SECONDS))


def lock_for(username: Any, address: str) -> Lock | None:
    """The lock that applies to this username or address now, if any."""
    since = timezone.now() - _window()
    recent = LoginFailure.objects.filter(created_at__gte=since)
    checks = [
        ("user", recent.filter(username=_norm(username)), int(settings.ARCANA_LOGIN_MAX_FAILURES_PER_USER)),
        ("address", recent.filter(address=address), int(settings.ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS)),
    ]
    for reason, qs, limit in checks:
        if (reason == "user" and not _norm(username)) or (reason == "address" and not address):
            continue
        stamps = list(qs.order_by("-created_at").values_list("created_at", flat=True)[:limit])
        if len(stamps) >= limit:
            # Locked until the oldest of the `limit` most recent failures leaves the window.
            until = stamps[-1] + _window()
            return Lock(reason, max(1, math.ceil((until - timezone.now()).total_seconds())))
    return None


class ThrottledModelBackend(ModelBackend):
    """Django's username/password backend, refusing while the username or the address is locked."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is None:
            username = kwargs.get(self._username_field())
        if lock_for(username, client_address(request)) is not None:
            # PermissionDenied stops authenticate() at once: no password check, no other backend.
            raise PermissionDenied("sign-in locked after repeated failures")
        return super().authenticate(request, username=username, password=password, **kwargs)

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return str(get_user_model().USERNAME_FIELD)


@receiver(user_login_failed)
def _record_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kw: Any
) -> None:
    address = client_address(request)
    username = credentials.get("username", "")
    if lock_for(username, address) is not None:
        return  # refused while locked: not counted, so the lock ends on time
    LoginFailure.objects.create(username=_norm(username), address=address)
    # Housekeeping: failures older than the window count for nothing.
    LoginFailure.objects.filter(created_at__lt=timezone.now() - _window()).delete()


@receiver(user_logged_in)
def _clear_failures(sender: Any, request: HttpRequest | None, user: Any, **kw: Any) -> None:
    LoginFailure.objects.filter(username=_norm(user.get_username())).delete()


class LoginView(auth_views.LoginView):
    """The login page, saying clearly when sign-in is locked (status 429 and a Retry-After header)."""

    def form_invalid(self, form: Any) -> HttpResponse:
        lock = lock_for(form.data.get("username"), client_address(self.request))
        response = super().form_invalid(form)
        if lock is not None:
            response.context_data["lock_message"] = lock.message  # type: ignore[attr-defined]
            response.status_code = 429
            response["Retry-After"] = str(lock.retry_after)
        return response
