"""Pages of conversations our workers run: the new-run form, and the conversation page (a playground
chat, or a script running) with its answer, context decisions and active pins updating live.

Thin views (STYLE.md item 7): the rules (what may be started, when a message is accepted, cancel)
are `traces.conversations`' service functions, the same the API calls; the context decisions and
pins come from the projections through `traces.runs.views.turn_ctx`, the turn page's own reading.
Members start and steer conversations; viewers read them (the form answers 403, steering 403);
outsiders get 404.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from traces import conversations as service
from traces.core import access
from traces.models import Action, Conversation, Project, Turn
from traces.runs import (
    context,  # the turn page's reading of a turn, not a second one
    live,
)

#: Rows of agent fields the form offers for a pool (empty rows are ignored).
AGENT_ROWS = 4
#: `name: message` at the start of a script line addresses the message to that pool agent.
AGENT_LINE = re.compile(r"^\s*([^:\n]{1,100}?)\s*:\s+(.+)$")
#: The scenario a new user gets, with its settings prefilled.
DEFAULT_MODEL = ("scripted", "pin-recall-demo")


# ---------------------------------------------------------------------------------------------------
# The new-run form


def _model_value(provider: str, model: str) -> str:
    return f"{provider}/{model}"


class AgentForm(forms.Form):
    """One pool agent: its name, its own system prompt, and its primitives (inherit the run's,
    override them with its own list, or opt out of all)."""

    PRIMITIVES_MODE = [("inherit", "Inherit the run's"), ("override", "Its own:"), ("none", "Opt out")]

    name = forms.CharField(max_length=100, required=False)
    system = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    primitives_mode = forms.ChoiceField(choices=PRIMITIVES_MODE, initial="inherit", required=False)
    primitives = forms.MultipleChoiceField(
        choices=[("recall", "recall"), ("pin", "pin")], required=False, widget=forms.CheckboxSelectMultiple
    )

    def agent(self) -> dict[str, Any] | None:
        """The agent as the service takes it, or None for an empty row."""
        data = self.cleaned_data
        if not data.get("name", "").strip():
            return None
        mode = data.get("primitives_mode") or "inherit"
        prims = None if mode == "inherit" else ([] if mode == "none" else list(data.get("primitives") or []))
        return {
            "name": data["name"].strip(),
            "system": data.get("system") or None,
            "cognitive_primitives": prims,
        }


class RunSettingsForm(forms.Form):
    """The settings a conversation runs with, as the "New run" and "Run again with…" pages ask them:
    provider / model (only what the operator configured), system prompt, primitives, window, pin budget."""

    model = forms.ChoiceField(label="Provider / model")
    system = forms.CharField(label="System prompt", widget=forms.Textarea(attrs={"rows": 3}), required=False)
    cognitive_primitives = forms.MultipleChoiceField(
        choices=[("recall", "recall"), ("pin", "pin (and unpin)")],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Cognitive primitives",
    )
    context_window = forms.IntegerField(
        min_value=256,
        max_value=2_000_000,
        required=False,
        label="Context window (tokens)",
        help_text="Empty: the scenario's, else 128,000.",
    )
    pin_budget_fraction = forms.FloatField(
        min_value=0.01, max_value=1.0, initial=0.5, label="Pin budget (fraction of the window)"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        model_field = self.fields["model"]
        assert isinstance(model_field, forms.ChoiceField)
        model_field.choices = [
            (p["name"], [(_model_value(p["name"], m), m) for m in p["models"]])
            for p in service.available_providers()
        ]


class NewRunForm(RunSettingsForm):
    """What `POST /api/v1/conversations` takes, as a page form; `spec()` builds that request's dict,
    and `traces.conversations.check_conversation_request` validates it (one set of rules)."""

    project = forms.TypedChoiceField(coerce=int)
    mode = forms.ChoiceField(
        choices=[("script", "Script: run these messages unattended"), ("playground", "Playground: I type")],
        initial="script",
        widget=forms.RadioSelect,
    )
    prompt_snapshots = forms.BooleanField(required=False, initial=True)
    script = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        required=False,
        help_text="One user message per line. In a pool, start a line with an agent's name and a colon "
        "(writer: Shorten it) to address it; other lines go to the first agent.",
    )
    pool = forms.BooleanField(required=False, label="A pool of agents")

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        project_field = self.fields["project"]
        assert isinstance(project_field, forms.ChoiceField)
        project_field.choices = [(p.pk, f"{p.team.name} / {p.slug}") for p in projects]

    def clean_model(self) -> tuple[str, str]:
        provider, _, model = self.cleaned_data["model"].partition("/")
        return provider, model

    def spec(self, agent_forms: list[AgentForm]) -> dict[str, Any]:
        """The request dict of `POST /api/v1/conversations` (without the project)."""
        data = self.cleaned_data
        provider, model = data["model"]
        agents = [a for f in agent_forms if (a := f.agent())] if data.get("pool") else []
        names = [a["name"] for a in agents]
        script: list[Any] | None = None
        if data["mode"] == "script":
            script = []
            for line in (data.get("script") or "").splitlines():
                if not line.strip():
                    continue
                m = AGENT_LINE.match(line)
                if agents and m and m.group(1) in names:
                    script.append({"agent": m.group(1), "content": m.group(2).strip()})
                else:
                    script.append({"agent": names[0], "content": line.strip()} if agents else line.strip())
        return {
            "provider": provider,
            "model": model,
            "system": data.get("system") or None,
            "cognitive_primitives": list(data.get("cognitive_primitives") or []),
            "context_window": data.get("context_window"),
            "pin_budget_fraction": data["pin_budget_fraction"],
            "prompt_snapshots": bool(data.get("prompt_snapshots")),
            "script": script,
            "agents": agents or None,
        }


def _initial(project: Project | None) -> dict[str, Any]:
    """The form a new user sees: the offline pin-recall demo, ready to start."""
    details = service.scenario_details().get(DEFAULT_MODEL[1], {})
    return {
        "project": project.pk if project else None,
        "model": _model_value(*DEFAULT_MODEL),
        "mode": "script",
        "system": details.get("system") or "",
        "cognitive_primitives": details.get("cognitive_primitives") or [],
        "context_window": details.get("context_window"),
        "pin_budget_fraction": 0.5,
        "prompt_snapshots": True,
        "script": "\n".join(details.get("script") or []),
    }


def _field_of(detail_field: str) -> str | None:
    """The form field a service error names (`script[3]` → script, `agents[0].name` → pool)."""
    name = detail_field.split("[", 1)[0].split(".", 1)[0]
    return {"agents": "pool", "provider": "model"}.get(name, name)


@login_required
@require_http_methods(["GET", "POST"])
def new(request: HttpRequest) -> HttpResponse:
    """The new-run form; a valid POST starts the conversation and opens its page."""
    projects = list(access.projects(request, Action.CONVERSE).select_related("team").distinct())
    if not projects:
        # Viewers read runs but may not start one (outsiders have no project to start one in).
        raise PermissionDenied("Your role may read runs but not start conversations.")
    agent_prefixes = [f"agent{i}" for i in range(AGENT_ROWS)]
    if request.method == "POST":
        form = NewRunForm(request.POST, projects=projects)
        agent_forms = [AgentForm(request.POST, prefix=p) for p in agent_prefixes]
        if form.is_valid() and all(f.is_valid() for f in agent_forms):
            project = next(p for p in projects if p.pk == form.cleaned_data["project"])
            try:
                spec = service.check_conversation_request(form.spec(agent_forms))
                conv = service.start_conversation(project, spec, user=request.user)
            except service.ConversationInputError as exc:
                for d in exc.detail:
                    field = _field_of(d["field"])
                    form.add_error(field if field in form.fields else None, f"{d['field']}: {d['message']}")
            except service.ConversationLimitError as exc:
                form.add_error(None, str(exc))
            else:
                return redirect(conversation_url(conv))
    else:
        form = NewRunForm(initial=_initial(projects[0]), projects=projects)
        agent_forms = [AgentForm(prefix=p) for p in agent_prefixes]
    ctx = {"form": form, "agent_forms": agent_forms, "scenarios": service.scenario_details()}
    return render(request, "traces/conversation_new.html", ctx, status=400 if form.errors else 200)


# ---------------------------------------------------------------------------------------------------
# The conversation page


def conversation_url(conv: Conversation) -> str:
    return reverse("traces:conversation", kwargs={"project_id": conv.project_id, "conversation_id": conv.pk})


def _get_conversation_for_user(
    request: HttpRequest, project_id: int, conversation_id: int, only: tuple[str, ...] = ()
) -> Conversation:
    """The conversation if the caller is in its project's team, else 404 (never 403). `only`: just
    these columns (the live poll's tag)."""
    qs = Conversation.objects.filter(
        pk=conversation_id, project_id=project_id, project__in=access.projects(request)
    )
    conv = (qs.only(*only) if only else qs.select_related("project__team")).first()
    if conv is None:
        raise Http404("No such conversation.")
    return conv


def _conversation_tag(conv: Conversation) -> str:
    """The live fragment's version: the conversation row and its run's (traces/runs/live.py)."""
    run = conv.run
    return live.etag(
        "conversation",
        conv.pk,
        conv.status,
        conv.updated_at.isoformat(),
        conv.cursor,
        live.run_token(run) if run else None,
    )


def _live_ctx(request: HttpRequest, conv: Conversation) -> dict[str, Any]:
    """The transcript, the turn now running or last run, and beside it that turn's context decisions,
    its primitive calls and the pins active at it (all read from the projections, so they move while
    the turn runs, step by step)."""
    run = conv.run
    transcript = list(conv.transcript or [])
    pending = [dict(m, index=i) for i, m in enumerate(conv.script[conv.cursor :], start=conv.cursor)]
    # The agent whose turn the side panel shows: the one running now, else the last that answered.
    if pending and conv.is_active:
        agent = pending[0].get("agent") or ""
    elif transcript:
        agent = transcript[-1].get("agent") or ""
    else:
        agent = (conv.agent_names or [""])[0]
    side: dict[str, Any] | None = None
    if run is not None:
        last = (
            Turn.objects.filter(run=run, agent=agent)
            .order_by("-number")
            .values_list("number", flat=True)
            .first()
        )
        if last is not None:
            side = context.turn_ctx(request, run, agent, last)
    # The running turn's latest words, before the transcript has its answer.
    working = None
    if side and pending and conv.is_active:
        done_turns = {t.get("turn") for t in transcript if (t.get("agent") or "") == agent}
        if side["turn"].number not in done_turns:
            working = side
    return {
        "conv": conv,
        "run": run,
        "transcript": transcript,
        "pending": pending,
        "agent": agent,
        "side": side,
        "working": working,
        "may_steer": access.can(request, conv.project.team_id, Action.CONVERSE),
        "live_etag": _conversation_tag(conv),
        # Poll while a worker owns it or its run still streams; a playground waiting for the user, or
        # a finished conversation, changes only when someone acts (the page restarts polling then).
        "is_live": conv.is_active
        or bool(run and run.is_live and not conv.is_finished and not conv.is_waiting),
    }


@login_required
@require_GET
def conversation(request: HttpRequest, project_id: int, conversation_id: int) -> HttpResponse:
    conv = _get_conversation_for_user(request, project_id, conversation_id)
    return render(request, "traces/conversation.html", _live_ctx(request, conv))


@login_required
@require_GET
def conversation_live(request: HttpRequest, project_id: int, conversation_id: int) -> HttpResponse:
    """The part of the conversation page that changes, for the page polling it (304 when unchanged)."""
    # The tag's columns only: an unchanged poll (304) must not load and parse the saved session state
    # and the transcript, which grow with every turn (traces/runs/live.py).
    light = _get_conversation_for_user(
        request,
        project_id,
        conversation_id,
        only=("id", "project_id", "run_id", "status", "updated_at", "cursor"),
    )
    tag = _conversation_tag(light)
    if unchanged := live.not_modified(request, tag):
        return unchanged
    conv = _get_conversation_for_user(request, project_id, conversation_id)
    return live.tagged(render(request, "traces/_conversation_live.html", _live_ctx(request, conv)), tag)


def _steerable(request: HttpRequest, project_id: int, conversation_id: int) -> Conversation:
    conv = _get_conversation_for_user(request, project_id, conversation_id)
    access.require(request, conv.project.team_id, Action.CONVERSE)
    return conv


@login_required
@require_POST
def conversation_message(request: HttpRequest, project_id: int, conversation_id: int) -> HttpResponse:
    """The message form without JavaScript (the page's script posts to the API instead)."""
    conv = _steerable(request, project_id, conversation_id)
    try:
        service.post_message(conv, request.POST.get("content", ""), agent=request.POST.get("agent") or None)
    except service.ConversationInputError as exc:
        messages.error(request, "; ".join(d["message"] for d in exc.detail))
    except service.ConversationBusyError as exc:
        messages.error(request, str(exc))
    return redirect(conversation_url(conv))


@login_required
@require_POST
def conversation_cancel(request: HttpRequest, project_id: int, conversation_id: int) -> HttpResponse:
    conv = _steerable(request, project_id, conversation_id)
    service.cancel_conversation(conv)
    return redirect(conversation_url(conv))
