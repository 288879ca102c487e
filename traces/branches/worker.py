"""The worker side of a re-run (`traces.tasks.rerun_step`): claim the branch, read the step's context
from the stored events, apply the edits, call the provider once, and store the branch run through
the one ingest path (`traces.conversations.sink.StoreSink`, as conversations do)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from runtime import ArcanaRuntimeError, OpenAICompatibleProvider, Provider
from runtime.rerun import RerunResult, apply_edits, parse_edits, rerun_step, scripted_provider
from traces.branches.actions import RerunInputError, step_context_of
from traces.conversations.providers import SCRIPTED, server_providers
from traces.conversations.sink import StoreSink
from traces.models import Branch

log = logging.getLogger(__name__)

#: A branch whose task started this many times without finishing is failed.
MAX_ATTEMPTS = 3

#: A branch `running` for longer than this lost its worker (a re-run is one model call, which its
#: provider's timeouts and retries end well within): a redelivered task may claim it again.
STALE_AFTER = timedelta(minutes=15)


def claim(branch_id: int) -> bool:
    """`queued` → `running` with a conditional update, so two deliveries of one task never both run
    it; or a `running` row whose worker died (`STALE_AFTER`), for the task Celery delivers again."""
    now = timezone.now()
    claimable = Q(status=Branch.Status.QUEUED) | Q(
        status=Branch.Status.RUNNING, started_at__lt=now - STALE_AFTER
    )
    return (
        Branch.objects.filter(claimable, pk=branch_id).update(
            status=Branch.Status.RUNNING, attempts=F("attempts") + 1, started_at=now
        )
        == 1
    )


def build_provider(branch: Branch, messages: list[dict[str, Any]]) -> Provider:
    """The provider the branch names: `scripted` (offline: it answers with what it was given), or an
    `ARCANA_PROVIDERS` entry as an OpenAI-compatible client (its key read here, never stored)."""
    if branch.provider == SCRIPTED:
        return scripted_provider(messages, model=branch.model or "scripted-rerun")
    sp = server_providers().get(branch.provider)
    if sp is None:
        raise RerunInputError(
            [{"field": "provider", "message": f"provider {branch.provider!r} is no longer configured"}]
        )
    extra: dict[str, Any] = {}
    if sp.max_retries is not None:
        extra["max_retries"] = sp.max_retries
    if sp.timeout is not None:
        extra["timeout"] = sp.timeout
    return OpenAICompatibleProvider(
        sp.name, base_url=sp.base_url, model=branch.model, api_key=sp.api_key, stream=sp.stream, **extra
    )


def run_branch(branch_id: int) -> dict[str, Any]:
    """The body of `traces.tasks.rerun_step`: the re-run, its run stored, the branch `completed` (with
    the answer) or `failed` (with why). Safe to deliver twice: the row is claimed first, and the
    branch's events have deterministic ids."""
    if not claim(branch_id):
        return {"branch": branch_id, "skipped": "not claimable"}
    branch = Branch.objects.select_related("run", "project").get(pk=branch_id)
    if branch.attempts > MAX_ATTEMPTS:
        return _finish(branch, Branch.Status.FAILED, error=f"worker lost {MAX_ATTEMPTS} times")
    store = StoreSink(branch.project)
    result: RerunResult | None = None
    error = ""
    try:
        context = step_context_of(branch.run, branch.turn_number, branch.step_number, branch.agent)
        edits = parse_edits(branch.edits, context)
        messages = apply_edits(context, edits)
        provider = build_provider(branch, messages)
        result = asyncio.run(_run(context, messages, provider, branch, edits, store))
        store.flush()
        error = result.error or ""
    except (RerunInputError, ArcanaRuntimeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        log.exception("branch %s failed", branch_id)
        error = f"{type(exc).__name__}: {exc}"
    finally:
        store.close()
    if error:
        return _finish(branch, Branch.Status.FAILED, error=error)
    assert result is not None
    return _finish(branch, Branch.Status.COMPLETED, answer=result.answer or "", model=result.model)


async def _run(
    context: Any, messages: Any, provider: Provider, branch: Branch, edits: Any, store: StoreSink
) -> RerunResult:
    try:
        return await rerun_step(
            context,
            messages,
            provider,
            run_id=branch.branch_run_id,
            sink=store,
            edits=edits,
            provider_name=branch.provider,
            model=branch.model or None,
        )
    finally:
        await provider.aclose()


def _finish(
    branch: Branch, status: str, *, error: str = "", answer: str = "", model: str | None = None
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "status": status,
        "error": error[:2000],
        "answer": answer,
        "finished_at": timezone.now(),
    }
    if model:
        fields["model"] = model[:200]
    Branch.objects.filter(pk=branch.pk).update(**fields)
    return {"branch": branch.pk, "status": status, "run_id": branch.branch_run_id}
