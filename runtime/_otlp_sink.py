"""A trace sink that exports our runs as OpenTelemetry spans (OTLP/HTTP), GenAI conventions plus `arcana.*`.

    sink = OtlpExportSink("https://arcana.example.com", headers={"Authorization": "Bearer ak_..."})
    rt = Runtime(providers, trace_sinks=[JsonlFileSink("./traces"), sink])

Needs the `otlp-export` extra (`pip install "arcana-console[otlp-export]"`: `opentelemetry-sdk`,
`opentelemetry-exporter-otlp-proto-http`), imported when the sink is made; without it the sink raises
`OtlpDependencyError`. Spans go through the SDK's own `OTLPSpanExporter` (batched, retried by the
SDK), so any OTLP backend takes them, and Arcana Console's `/v1/traces` reads the `arcana.*`
attributes back into the same events as the JSONL trace (docs/trace-format.md, "OTLP export").

Spans, per run (`gen_ai.conversation.id` = our run id on every span):

- `invoke_agent [agent]`: one per turn (per pool agent), the root of its own trace; `arcana.turn`.
  It ends with the turn: after a step that answered without tool calls or at a `state_change`, else
  when the next turn of the agent begins or the run closes (a failed send's `error` and the failed
  `turn` event after it stay on it).
- `chat <model>`: one per step, ended when the step's model call is recorded (its `llm_call`
  event, or the provider error), lasting the call's latency; messages in the parts form, model,
  usage, finish reason, tool definitions, and `arcana.*` (the context decision, pins, the step's
  new messages, the budget snapshot).
- `execute_tool <name>`: one per tool call and per primitive call (`arcana.primitive`), ended when
  its event is written, lasting the call's duration.

Events the spans have no place for (a summarizer's `llm_call`, a summary call's `error`, a
`state_change`, event types we do not know) ride along whole as span events named `arcana.event`.
Like every sink, `write()` never raises into the conversation; the SDK sends in the background.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ._trace import TraceEvent
from .errors import ConfigError, OtlpDependencyError

logger = logging.getLogger("runtime.otlp_sink")

__all__ = ["OtlpExportSink", "message_parts"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Metadata keys every event of ours carries (the writer's stamps): not repeated in `arcana.*`.
_STAMPS = frozenset({"producer", "turn", "step", "console_turn", "console_step", "source_agent"})
_ENVELOPE_EXTRA = (
    "model",
    "llm_latency_ms",
    "llm_request_digest",
    "llm_response_digest",
    "tool_call",
    "budgets",
    "stop_reason",
    "stop_detail",
)


def _ns(event: TraceEvent) -> int:
    dt = datetime.fromisoformat(event.timestamp)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return ((dt - _EPOCH) // timedelta(microseconds=1)) * 1000


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _own_metadata(event: TraceEvent) -> dict[str, Any]:
    return {k: v for k, v in event.metadata.items() if k not in _STAMPS}


def _whole_event(event: TraceEvent) -> str:
    """An event the spans have no place for, as the JSON of an `arcana.event` span event."""
    out: dict[str, Any] = {"event_type": event.event_type, "metadata": _own_metadata(event)}
    for key in _ENVELOPE_EXTRA:
        value = getattr(event, key, None)
        if value is not None:
            out[key] = value
    return _json(out)


def message_parts(m: Mapping[str, Any]) -> dict[str, Any]:
    """One message of ours (OpenAI chat shape, or the snapshot's flattened `tool_calls`) in the GenAI
    parts form, losslessly: content as one text part (None: none), each tool call a `tool_call` part
    (arguments as sent), a tool message's content a `tool_call_response` part; `name` kept on the
    message. `runtime.otlp` reads it back (`_recorded`)."""
    role = m.get("role")
    parts: list[dict[str, Any]] = []
    content = m.get("content")
    if role == "tool" or m.get("tool_call_id") is not None:
        parts.append({"type": "tool_call_response", "id": m.get("tool_call_id"), "result": content})
    elif content is not None:
        parts.append({"type": "text", "content": content})
    for call in m.get("tool_calls") or []:
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    out: dict[str, Any] = {"role": role, "parts": parts}
    if m.get("name") is not None:
        out["name"] = m["name"]
    return out


def _tool_definition(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool `{"type": "function", "function": {...}}` in the GenAI flat form."""
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping) and "type" not in function:
        return {"type": "function", **function}
    return dict(tool)


@dataclass
class _Step:
    turn: int
    step: int
    decision: TraceEvent | None = None
    snapshot: TraceEvent | None = None
    answer: TraceEvent | None = None
    extra: list[TraceEvent] = field(default_factory=list)
    emitted: bool = False


@dataclass
class _Agent:
    """What one run's agent (None: a plain chat) has open: its turn's span and its current step."""

    turn: int | None = None
    span: Any = None
    context: Any = None
    last_ns: int = 0
    ended: bool = True
    step: _Step | None = None
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)


class OtlpExportSink:
    """Exports every event the runtime writes as OpenTelemetry spans over OTLP/HTTP (module docstring).

    - `endpoint`: the collector: a base URL (`/v1/traces` is added, as `OTEL_EXPORTER_OTLP_ENDPOINT`
      means) or the full traces URL; None reads the SDK's `OTEL_EXPORTER_OTLP_*` variables.
    - `headers`: sent with every export, e.g. `{"Authorization": "Bearer ak_..."}`.
    - `service_name` and `resource`: the resource of every span.
    - `batch`: the SDK's `BatchSpanProcessor` (default) or `SimpleSpanProcessor` (one export per span).
    - `exporter`: any SDK `SpanExporter` instead of the OTLP/HTTP one (tests, another protocol).

    `flush()` waits for the SDK to export the spans ended so far; `close_run(run_id)` ends that run's
    open turn spans (a session does at its end); `close()` ends everything and shuts the SDK down."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        service_name: str = "arcana-console",
        resource: Mapping[str, Any] | None = None,
        timeout: float = 10.0,
        batch: bool = True,
        exporter: Any = None,
    ) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

            if exporter is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise OtlpDependencyError(
                "OtlpExportSink needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http: "
                'pip install "arcana-console[otlp-export]"'
            ) from exc
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"OtlpExportSink endpoint must start with http:// or https://, got {endpoint!r}"
            )
        if exporter is None:
            url = endpoint
            if url is not None and not url.rstrip("/").endswith("/v1/traces"):
                url = url.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=url, headers=dict(headers or {}), timeout=timeout)
        self._trace = trace
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name, **(resource or {})})
        )
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        )
        self._tracer = self.provider.get_tracer("arcana-console")
        self._lock = threading.Lock()
        self._agents: dict[tuple[str, str | None], _Agent] = {}

    def __repr__(self) -> str:
        return "OtlpExportSink()"

    # -- the sink ------------------------------------------------------------------------------
    def write(self, event: TraceEvent) -> None:
        with self._lock:
            try:
                self._write(event)
            except Exception:
                logger.exception("OTLP export of a %s event of run %s failed", event.event_type, event.run_id)

    def flush(self) -> None:
        """Export every span ended so far (a turn's own span is ended with its turn)."""
        self.provider.force_flush()

    def close_run(self, run_id: str) -> None:
        with self._lock:
            for (run, _), state in list(self._agents.items()):
                if run == run_id:
                    self._end_turn(state)
                    del self._agents[(run, _)]

    def close(self) -> None:
        with self._lock:
            for state in self._agents.values():
                self._end_turn(state)
            self._agents.clear()
        self.provider.shutdown()

    # -- events -> spans -----------------------------------------------------------------------
    def _write(self, event: TraceEvent) -> None:
        md = event.metadata
        agent = md.get("source_agent")
        state = self._agents.setdefault((event.run_id, agent), _Agent())
        turn, number = md.get("console_turn"), md.get("console_step")
        ns = _ns(event)
        if not isinstance(turn, int) or not isinstance(number, int):
            if state.span is not None:  # a run-wide event: kept on the turn's span
                state.span.add_event("arcana.event", {"arcana.event": _whole_event(event)}, ns)
            return
        if state.turn != turn:
            self._end_turn(state)
            self._start_turn(state, event, turn, agent, ns)
        state.last_ns = max(state.last_ns, ns)
        step = state.step
        if step is None or (step.turn, step.step) != (turn, number):
            if step is not None and not step.emitted and step.decision is not None:
                self._chat_span(state, event.run_id, agent, step, None, None, state.last_ns)
            step = state.step = _Step(turn, number)
        self._dispatch(state, event, agent, step, ns)

    def _dispatch(self, state: _Agent, event: TraceEvent, agent: str | None, step: _Step, ns: int) -> None:
        kind, md = event.event_type, event.metadata
        if kind == "context_decision":
            step.decision = event
        elif kind == "prompt_snapshot":
            step.snapshot = event
        elif kind == "turn" and not step.emitted:
            step.answer = event
        elif kind == "llm_call" and md.get("purpose") != "summarize" and not step.emitted:
            self._chat_span(state, event.run_id, agent, step, event, None, ns)
            calls = (md_facts(step.answer) or {}).get("tool_calls") if step.answer else None
            if step.answer is not None and not calls and step.answer.stop_reason is None:
                self._end_turn(state)  # answered: the turn is over
        elif kind in ("cognitive_primitive", "tool_call") or (
            kind == "error" and md.get("tool_call_id") is not None and md.get("purpose") is None
        ):
            self._tool_span(state, event, agent, step, ns)
        elif kind == "error" and md.get("purpose") is None and not step.emitted:
            # The turn's span stays open: a failed send's own `turn` event follows (kept whole on it).
            self._chat_span(state, event.run_id, agent, step, None, event, ns)
        elif kind == "state_change" and state.span is not None:
            state.span.add_event("arcana.event", {"arcana.event": _whole_event(event)}, ns)
            state.span.set_attribute("arcana.stop_reason", str(event.stop_reason))
            self._end_turn(state)
        elif not step.emitted:
            step.extra.append(event)
        elif state.span is not None:
            state.span.add_event("arcana.event", {"arcana.event": _whole_event(event)}, ns)

    def _start_turn(self, state: _Agent, event: TraceEvent, turn: int, agent: str | None, ns: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": event.run_id,
            "arcana.turn": turn,
        }
        if agent is not None:
            attributes["gen_ai.agent.name"] = agent
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        span = self._tracer.start_span(name, context=None, attributes=attributes, start_time=ns)
        state.turn, state.span, state.last_ns, state.ended = turn, span, ns, False
        state.context = self._trace.set_span_in_context(span)
        state.step = None

    def _end_turn(self, state: _Agent) -> None:
        step = state.step
        if step is not None and not step.emitted and step.decision is not None and state.span is not None:
            self._chat_span(state, "", None, step, None, None, state.last_ns)
        if state.span is not None and not state.ended:
            state.span.end(end_time=state.last_ns)
            state.ended = True

    def _base(self, state: _Agent, run_id: str, agent: str | None, step: _Step) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": run_id,
            "arcana.turn": step.turn,
            "arcana.step": step.step,
        }
        if agent is not None:
            attributes["gen_ai.agent.name"] = agent
        return attributes

    def _chat_span(
        self,
        state: _Agent,
        run_id: str,
        agent: str | None,
        step: _Step,
        call: TraceEvent | None,
        error: TraceEvent | None,
        ns: int,
    ) -> None:
        """The step's `chat` span, from its decision, snapshot, answer and model call (or error)."""
        step.emitted = True
        first = step.decision or step.snapshot or step.answer or call or error
        if first is None:
            return
        run_id = run_id or first.run_id
        agent = agent if agent is not None else first.metadata.get("source_agent")
        attributes = self._base(state, run_id, agent, step)
        attributes["gen_ai.operation.name"] = "chat"
        answer = step.answer
        snapshot = step.snapshot.metadata.get("prompt_snapshot") if step.snapshot else None
        request_model = (snapshot or {}).get("model") or (answer.model if answer else None)
        response_model = answer.model if answer else None
        if request_model:
            attributes["gen_ai.request.model"] = request_model
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        recorded = call or error
        provider = recorded.metadata.get("provider") if recorded is not None else None
        if provider:
            attributes["gen_ai.provider.name"] = provider
        if isinstance(snapshot, Mapping):
            attributes.update(_snapshot_attributes(snapshot))
        if answer is not None:
            attributes.update(_answer_attributes(answer))
        if step.decision is not None:
            attributes["arcana.context_decision"] = _json(_own_metadata(step.decision))
        active = [p for p in state.pins.values() if p["until_turn"] is None or step.turn <= p["until_turn"]]
        attributes["arcana.pins"] = _json(active)
        if call is not None:
            attributes["arcana.llm_call"] = _whole_event(call)
        if error is not None:
            attributes["error.type"] = str(error.metadata.get("error") or "error")
            attributes["arcana.error"] = _whole_event(error)
        latency = (answer.llm_latency_ms if answer else None) or 0
        end = _ns(answer) if answer is not None else ns
        start = end - latency * 1_000_000 if answer is not None else _ns(first)
        name = f"chat {response_model or request_model}" if (response_model or request_model) else "chat"
        span = self._tracer.start_span(
            name,
            context=state.context,
            kind=self._trace.SpanKind.CLIENT,
            attributes=attributes,
            start_time=start,
        )
        for extra in step.extra:
            span.add_event("arcana.event", {"arcana.event": _whole_event(extra)}, _ns(extra))
        if error is not None:
            message = str(error.metadata.get("message") or error.metadata.get("error") or "error")
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        span.end(end_time=max(end, start))

    def _tool_span(self, state: _Agent, event: TraceEvent, agent: str | None, step: _Step, ns: int) -> None:
        """An `execute_tool` span: a tool call, a primitive call (`arcana.primitive`), or a call of a
        tool that does not exist (its `error` event)."""
        md = event.metadata
        attributes = self._base(state, event.run_id, agent, step)
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.type"] = "function"
        if md.get("tool_call_id") is not None:
            attributes["gen_ai.tool.call.id"] = str(md["tool_call_id"])
        duration = 0
        error: str | None = None
        if event.event_type == "cognitive_primitive":
            name = str(md.get("primitive"))
            args, result = md.get("args"), md.get("result")
            attributes["arcana.primitive"] = name
            attributes["arcana.primitive.args"] = _json(args)
            attributes["arcana.primitive.result"] = _json(result)
            for key in ("tokens", "raw_arguments"):
                if md.get(key) is not None:
                    attributes[f"arcana.primitive.{key}"] = md[key]
            self._track_pin(state, name, args, result, md.get("tokens"), step)
        elif event.event_type == "tool_call":
            record = event.tool_call or {}
            name = str(record.get("name") or "?")
            args, result = md.get("arguments"), md.get("result")
            attributes["arcana.tool_call"] = _json(record)
            duration = record.get("duration_ms") or 0
            error = record.get("error")
        else:  # an unknown tool's error event
            args, result = None, md.get("result")
            name = str(md.get("tool_name") or _asked_name(step, md.get("tool_call_id")) or "?")
            attributes["arcana.error"] = _whole_event(event)
            error = str(md.get("message") or md.get("error") or "error")
        attributes["gen_ai.tool.name"] = name
        if args is not None:
            attributes["gen_ai.tool.call.arguments"] = args if isinstance(args, str) else _json(args)
        if result is not None:
            attributes["gen_ai.tool.call.result"] = result if isinstance(result, str) else _json(result)
        if error is not None:
            attributes["error.type"] = str(md.get("error") or md.get("error_category") or "tool_error")
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=state.context,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=ns - int(duration) * 1_000_000,
        )
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end(end_time=ns)

    @staticmethod
    def _track_pin(state: _Agent, primitive: str, args: Any, result: Any, tokens: Any, step: _Step) -> None:
        """The pins active in the agent's working set, for `arcana.pins` on later steps."""
        if not isinstance(result, Mapping):
            return
        if primitive == "pin" and result.get("pinned") is True and result.get("already_pinned") is False:
            pin_id = str(result.get("pin_id"))
            state.pins[pin_id] = {
                "pin_id": pin_id,
                "label": result.get("label"),
                "tokens": tokens,
                "created_turn": step.turn,
                "created_step": step.step,
                "until_turn": result.get("until_turn"),
                "content": args.get("content") if isinstance(args, Mapping) else None,
            }
        elif primitive == "unpin" and result.get("unpinned") is True:
            state.pins.pop(str(result.get("pin_id")), None)


def md_facts(event: TraceEvent | None) -> dict[str, Any] | None:
    facts = event.metadata.get("facts") if event is not None else None
    return facts if isinstance(facts, dict) else None


def _asked_name(step: _Step, call_id: Any) -> str | None:
    for call in (md_facts(step.answer) or {}).get("tool_calls") or []:
        if isinstance(call, Mapping) and call.get("id") == call_id:
            name = call.get("name")
            return name if isinstance(name, str) else None
    return None


def _snapshot_attributes(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """What the model received: the first system message as `gen_ai.system_instructions`, the rest
    as `gen_ai.input.messages`, the tools as `gen_ai.tool.definitions`, the budgets as
    `arcana.budget_snapshot`."""
    messages = [m for m in snapshot.get("messages") or [] if isinstance(m, Mapping)]
    out: dict[str, Any] = {}
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        out["gen_ai.system_instructions"] = _json([{"type": "text", "content": messages[0]["content"]}])
        messages = messages[1:]
    out["gen_ai.input.messages"] = _json([message_parts(m) for m in messages])
    tools = snapshot.get("tools")
    if isinstance(tools, list) and tools:
        out["gen_ai.tool.definitions"] = _json([_tool_definition(t) for t in tools if isinstance(t, Mapping)])
    if snapshot.get("budget_snapshot") is not None:
        out["arcana.budget_snapshot"] = _json(snapshot["budget_snapshot"])
    return out


def _answer_attributes(answer: TraceEvent) -> dict[str, Any]:
    """What the model answered: `gen_ai.output.messages`, usage, finish reason, and the messages the
    step added to the history (`arcana.messages`, the user message on a turn's first step)."""
    md = answer.metadata
    facts = md_facts(answer) or {}
    out: dict[str, Any] = {}
    message: dict[str, Any] = {"role": "assistant", "parts": []}
    text = facts.get("assistant_text")
    if text is not None:
        message["parts"].append({"type": "text", "content": text})
    for call in facts.get("tool_calls") or []:
        if isinstance(call, Mapping):
            message["parts"].append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                }
            )
    finish = facts.get("finish_reason")
    if finish is not None:
        message["finish_reason"] = finish
        out["gen_ai.response.finish_reasons"] = [str(finish)]
    out["gen_ai.output.messages"] = _json([message])
    usage = facts.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    for key, attribute in (
        ("prompt_tokens", "gen_ai.usage.input_tokens"),
        ("completion_tokens", "gen_ai.usage.output_tokens"),
    ):
        if isinstance(usage.get(key), int):
            out[attribute] = usage[key]
    if isinstance(md.get("messages"), list):
        out["arcana.messages"] = _json(md["messages"])
    if answer.stop_reason is not None:
        out["arcana.stop_reason"] = answer.stop_reason
        out["arcana.stop_detail"] = answer.stop_detail or ""
    return out
