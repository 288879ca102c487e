"""The compare page of two runs, its live fragment while one is still running, and "Run again with…".

Thin views (STYLE.md item 7): the comparison is `runtime.compare` fed by `traces.compare.service` from the
projections (the one implementation the CLI and the API use too); the fidelity maps and pin lanes are
the run page's own (`traces.runs.queries`), drawn one above the other on one scale. Anything outside the
caller's teams is a 404, for either run.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from runtime.compare import LEVELS, Comparison, TurnData, TurnPair, summary_differs
from traces import conversations as service
from traces.compare import service as cmp
from traces.conversations.views import RunSettingsForm
from traces.core import access
from traces.models import Action, Conversation, Run
from traces.runs import charts, live

#: Steps of each fidelity map drawn at once on the compare page: half the run page's window, since
#: the page draws two (`bench/compare.py`: the maps are most of the page's server time).
MAP_WINDOW = charts.MAP_WINDOW // 2
#: Aligned turn pairs listed in full; longer runs list the pairs around the divergence and the turn shown.
TURNS_SHOWN = 100


# ---------------------------------------------------------------------------------------------------
# Resolving the two runs (or the conversation that will become one)


class _Side:
    """One side of the comparison: the run, or — before its first event is stored — the conversation
    that will write it."""

    def __init__(self, ref: str, run: Run | None, conversation: Conversation | None) -> None:
        self.ref = ref
        self.run = run
        self.conversation = conversation if conversation is not None else (run.conversation if run else None)

    @property
    def waiting(self) -> bool:
        """Still being written: no event yet, or a run that is live or whose conversation is active."""
        if self.run is None:
            # A conversation that ended before its first event (cancelled while queued) never will.
            return self.conversation is None or not self.conversation.is_finished
        return self.run.is_updating

    @property
    def ended_empty(self) -> bool:
        """No run, and none coming: its conversation ended without writing an event."""
        return self.run is None and not self.waiting

    @property
    def progress(self) -> str:
        conv = self.conversation
        if conv is not None:
            total = len(conv.script) if conv.mode == Conversation.Mode.SCRIPT else None
            done = f"{conv.cursor} of {total} turns" if total is not None else f"{conv.cursor} turns"
            reason = f" · {conv.reason}" if conv.reason and conv.is_finished else ""
            return f"{conv.get_status_display().lower()} · {done}{reason}"
        if self.run is not None:
            return f"{self.run.status} · {self.run.turns} turns"
        return "waiting for the first event"

    def token(self) -> tuple[Any, ...]:
        conv = self.conversation
        return (
            live.run_token(self.run) if self.run else None,
            (conv.pk, conv.status, conv.updated_at.isoformat(), conv.cursor) if conv else None,
        )


def _side(request: HttpRequest, ref: str | None) -> _Side:
    """The run `ref` (`<project_id>:<run_id>`) names, if the caller may read it; else a conversation
    of theirs that will write that run; else 404 (outsiders learn nothing)."""
    run = cmp.find_run(request, ref)
    if run is not None:
        return _Side(str(ref), run, None)
    parsed = cmp.parse_run_ref(ref)
    if parsed is not None:
        conv = access.find_conversation(request, *parsed)
        if conv is not None:
            return _Side(str(ref), conv.run, conv)
    raise Http404("No such run.")


def _sides(request: HttpRequest) -> tuple[_Side, _Side]:
    return _side(request, request.GET.get("a")), _side(request, request.GET.get("b"))


def _live_tag(a: _Side, b: _Side) -> str:
    return live.etag("compare", a.ref, b.ref, a.token(), b.token(), a.waiting or b.waiting)


# ---------------------------------------------------------------------------------------------------
# The page


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _shown_pairs(c: Comparison, pair: TurnPair | None) -> tuple[list[TurnPair], int]:
    """The pairs the turn table lists: all of them, or for a long run the first `TURNS_SHOWN` around
    the divergence and the pair whose diff is shown. Returns (pairs, how many were left out)."""
    if len(c.pairs) <= TURNS_SHOWN:
        return c.pairs, 0
    centre = pair.index if pair is not None else (c.divergence.pair if c.divergence else 0)
    lo = max(0, min(centre - TURNS_SHOWN // 4, len(c.pairs) - TURNS_SHOWN))
    return c.pairs[lo : lo + TURNS_SHOWN], len(c.pairs) - TURNS_SHOWN


def _side_cells(t: TurnData | None) -> dict[str, Any] | None:
    """One side of a turn row, pre-formatted (a long run lists a hundred rows; plain lookups keep the
    template fast)."""
    if t is None:
        return None
    util = t.peak_utilization
    return {
        "number": t.number,
        "tokens": f"{t.prompt_tokens}+{t.completion_tokens}",
        "util": f"{util * 100:.0f}%" if util is not None else "—",
        "decisions": t.decisions(),
        "primitives": [line[:80] for line in t.primitives],
        "answer": (t.answer or "")[:120] + ("…" if t.answer and len(t.answer) > 120 else ""),
    }


def _turn_rows(c: Comparison, pairs: list[TurnPair], pair: TurnPair | None) -> list[dict[str, Any]]:
    first = c.divergence.pair if c.divergence is not None else None
    return [
        {
            "index": p.index,
            "a": _side_cells(p.a),
            "b": _side_cells(p.b),
            "same": p.same_working_sets,
            "first": p.index == first,
            "selected": pair is not None and p.index == pair.index,
            "turn": p.a.number if p.a else p.b.number if p.b else None,
        }
        for p in pairs
    ]


def _summary_rows(c: Comparison) -> list[dict[str, Any]]:
    rows = []
    for key, label, va, vb in c.summary_rows():
        rows.append({"key": key, "label": label, "a": va, "b": vb, "differs": summary_differs(key, va, vb)})
    return rows


def map_start(c: Comparison, request: HttpRequest, total: int) -> int:
    """The first step both maps draw: `?from=` (1-based), else a window opening a few steps before the
    divergence (where the two contexts part), else the start."""
    asked = _int(request.GET.get("from"))
    if asked is not None:
        return max(0, asked - 1)
    if c.divergence is None or total <= MAP_WINDOW:
        return 0
    index = 0
    for t in c.a.turns:
        if t.number == c.divergence.a_turn:
            break
        index += len(t.steps)
    return max(0, index - 5)


def compare_ctx(request: HttpRequest, run_a: Run, run_b: Run) -> dict[str, Any]:
    turn = _int(request.GET.get("turn"))
    # Pools: `?agent_a=` / `?agent_b=` choose the agents compared (default: each run's first).
    c = cmp.compare_runs(
        run_a, run_b, agent_a=request.GET.get("agent_a"), agent_b=request.GET.get("agent_b"), turn=turn
    )
    pair: TurnPair | None = None
    if turn is not None:
        pair = c.pair_for(a_turn=turn) or c.pair_for(b_turn=turn)
    elif c.divergence is not None:
        pair = c.pairs[c.divergence.pair]
    shown, cut = _shown_pairs(c, pair)
    agent_a, agent_b = c.a.agent or "", c.b.agent or ""
    steps = max(c.a.steps, c.b.steps)
    start = map_start(c, request, steps)
    window = min(MAP_WINDOW, max(steps, 1))
    last_turn = max(len(c.a.turns), len(c.b.turns), 1)
    return {
        "a": run_a,
        "b": run_b,
        "c": c,
        "summary": _summary_rows(c),
        "rows": _turn_rows(c, shown, pair),
        "pairs_cut": cut,
        "pair": pair,
        "diff": c.working_set_diff(pair) if pair is not None else None,
        "agent_a": agent_a,
        "agent_b": agent_b,
        "fmap_a": charts.fidelity_map(run_a, agent_a, start=start, window=window, scale_steps=window),
        "fmap_b": charts.fidelity_map(run_b, agent_b, start=start, window=window, scale_steps=window),
        "pins_a": charts.pin_chart(run_a, agent_a, last_turn),
        "pins_b": charts.pin_chart(run_b, agent_b, last_turn),
        "levels": LEVELS,
        "swap_url": cmp.compare_url(run_b, run_a),
        "diff_base": cmp.compare_url(run_a, run_b, agent_a=agent_a or None, agent_b=agent_b or None),
        # Pool agents to switch to: (agent, URL) per side.
        "agent_links_a": [
            (x, cmp.compare_url(run_a, run_b, agent_a=x, agent_b=agent_b or None)) for x in run_a.agents or []
        ],
        "agent_links_b": [
            (x, cmp.compare_url(run_a, run_b, agent_a=agent_a or None, agent_b=x)) for x in run_b.agents or []
        ],
    }


@login_required
@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    """`/compare?a=<project_id>:<run_id>&b=…` (or two `run=` values, as the runs list's checkboxes
    send them: redirected to the a/b form)."""
    picked = request.GET.getlist("run")
    if not picked and "a" not in request.GET and "b" not in request.GET:
        # `/compare` alone: how to pick two runs, not an error.
        return render(request, "traces/compare_pick.html", {"count": 0, "asked": False})
    if picked and "a" not in request.GET:
        if len(picked) != 2:
            return render(
                request, "traces/compare_pick.html", {"count": len(picked), "asked": True}, status=400
            )
        return redirect(cmp.compare_url(picked[0], picked[1]))
    a, b = _sides(request)
    ctx: dict[str, Any] = {"side_a": a, "side_b": b}
    if a.waiting or b.waiting or a.ended_empty or b.ended_empty:
        ctx["live_etag"] = _live_tag(a, b)
        ctx["live_url"] = reverse("traces:compare_live") + "?" + request.GET.urlencode()
        return render(request, "traces/compare_waiting.html", ctx)
    assert a.run is not None and b.run is not None
    ctx.update(compare_ctx(request, a.run, b.run))
    return render(request, "traces/compare.html", ctx)


@login_required
@require_GET
def compare_live(request: HttpRequest) -> HttpResponse:
    """The waiting page's progress fragment (304 while nothing changed); `data-live="false"` once both
    runs are complete, and the page's script then loads the comparison."""
    a, b = _sides(request)
    tag = _live_tag(a, b)
    if unchanged := live.not_modified(request, tag):
        return unchanged
    if not (a.waiting or b.waiting) and a.run is not None and b.run is not None:
        # Both complete: the page reloads next; read both runs now, so it finds them cached.
        cmp.run_data(a.run, request.GET.get("agent_a"))
        cmp.run_data(b.run, request.GET.get("agent_b"))
    ctx = {"side_a": a, "side_b": b}
    return live.tagged(render(request, "traces/_compare_progress.html", ctx), tag)


# ---------------------------------------------------------------------------------------------------
# Run again with…


class RunAgainForm(RunSettingsForm):
    """What "Run again with…" may change; everything else (script, agents, snapshots) is copied."""

    @classmethod
    def initial_for(cls, conv: Conversation) -> dict[str, Any]:
        cfg = conv.config or {}
        return {
            "model": f"{conv.provider}/{conv.model}",
            "cognitive_primitives": list(cfg.get("cognitive_primitives") or []),
            "context_window": cfg.get("context_window"),
            "pin_budget_fraction": cfg.get("pin_budget_fraction") or 0.5,
            "system": cfg.get("system") or "",
        }

    def request_for(self, conv: Conversation) -> dict[str, Any]:
        """The `POST /api/v1/conversations` body: the conversation's settings and script, changed."""
        data, cfg = self.cleaned_data, conv.config or {}
        provider, _, model = data["model"].partition("/")
        return {
            "provider": provider,
            "model": model,
            "system": data.get("system") or None,
            "cognitive_primitives": list(data.get("cognitive_primitives") or []),
            "context_window": data.get("context_window"),
            "pin_budget_fraction": data["pin_budget_fraction"],
            "prompt_snapshots": bool(cfg.get("prompt_snapshots", True)),
            "script": [dict(m) for m in conv.script] or None,
            "agents": cfg.get("agents"),
            # Kept: the run's name and tags as they show now (set on its page, else its trace's).
            **_labels_of(conv),
        }


def _labels_of(conv: Conversation) -> dict[str, Any]:
    run, cfg = conv.run, conv.config or {}
    if run is not None:
        return {"name": run.shown_name or None, "tags": run.shown_tags or None}
    return {"name": cfg.get("name") or None, "tags": cfg.get("tags") or None}


def _conversation_to_rerun(request: HttpRequest, project_id: int, conversation_id: int) -> Conversation:
    conv = (
        Conversation.objects.filter(
            pk=conversation_id, project_id=project_id, project__in=access.projects(request)
        )
        .select_related("project__team")
        .first()
    )
    if conv is None:
        raise Http404("No such conversation.")
    access.require(request, conv.project.team_id, Action.CONVERSE)
    return conv


@login_required
@require_http_methods(["GET", "POST"])
def run_again(request: HttpRequest, project_id: int, conversation_id: int) -> HttpResponse:
    """A form with the conversation's settings; a valid POST starts the new conversation through the
    service (the same checks as the API) and opens the compare page of the two runs, which waits for
    the new one to finish."""
    conv = _conversation_to_rerun(request, project_id, conversation_id)
    if request.method == "POST":
        form = RunAgainForm(request.POST)
        if form.is_valid():
            try:
                spec = service.check_conversation_request(form.request_for(conv))
                new = service.start_conversation(conv.project, spec, user=request.user)
            except service.ConversationInputError as exc:
                for d in exc.detail:
                    form.add_error(None, f"{d['field']}: {d['message']}")
            except service.ConversationLimitError as exc:
                form.add_error(None, str(exc))
            else:
                return redirect(
                    cmp.compare_url(f"{conv.project_id}:{conv.run_id}", f"{new.project_id}:{new.run_id}")
                )
    else:
        form = RunAgainForm(initial=RunAgainForm.initial_for(conv))
    ctx = {"conv": conv, "form": form, "run": conv.run}
    return render(request, "traces/run_again.html", ctx, status=400 if form.errors else 200)
