"""A step reuses the previous step's per-message results (the working set's message infos, each
message's JSON text, the request digest's hash state, context decisions written without a JSON round
trip): the trace and the request bodies are byte for byte those of building every step from scratch."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runtime import _json_text
from runtime._json_text import compact_text, flat_texts, splice_dumps
from runtime._trace_writer import TraceWriter, digest, request_digest
from runtime._working_set import WorkingSetBuilder
from tests.runtime.replay_conversation import lookup, random_script, replay


def from_scratch(monkeypatch: pytest.MonkeyPatch, script: dict[str, Any]) -> Any:
    with monkeypatch.context() as m:
        m.setattr(WorkingSetBuilder, "incremental", False)
        m.setattr(TraceWriter, "plain_decisions", False)
        m.setattr(_json_text, "REMEMBER", False)
        return replay(script)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32),
    window=st.sampled_from([1500, 3000, 6000, 12000, 60000]),
    turns=st.integers(2, 10),
)
def test_a_conversation_writes_what_a_from_scratch_build_writes(
    monkeypatch: pytest.MonkeyPatch, seed: int, window: int, turns: int
) -> None:
    script = random_script(seed, window=window, turns=turns)
    lines, bodies, outcomes = replay(script)
    assert (lines, bodies, outcomes) == from_scratch(monkeypatch, script)
    # Each digest written is the digest of a request sent (a failed request writes no llm_call).
    sent = {digest({"messages": b["messages"], "tools": b.get("tools")}) for b in map(json.loads, bodies)}
    calls = [json.loads(line) for line in lines if b'"event_type":"llm_call"' in line]
    chat = [c for c in calls if c["metadata"]["purpose"] == "chat"]  # a summary's digest has no tools key
    assert chat and all(c["llm_request_digest"] in sent for c in chat)


def test_a_tight_window_compresses_and_still_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    script = random_script(5, window=3000, turns=10)
    lines, bodies, outcomes = replay(script)
    written = b"\n".join(lines)
    assert b'"outcome":"compressed"' in written and b'"outcome":"dropped"' in written
    assert b'"fidelity":"L2"' in written and b'"fidelity":"L3"' in written
    assert (lines, bodies, outcomes) == from_scratch(monkeypatch, script)


def test_the_digest_resumes_only_from_the_same_messages() -> None:
    a, b, c = ({"role": "user", "content": t} for t in ("one", "two", "three"))
    for messages in ([a, b], [a, b, c], [a, c], [b], [], [a, b, c], [a, b, c], [a, {"role": "user"}]):
        assert request_digest(messages, None) == digest({"messages": messages, "tools": None})
    b["content"] = "changed in place"
    assert request_digest([a, b, c], []) == digest({"messages": [a, b, c], "tools": []})


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), values, max_size=4), st.lists(values, max_size=5))
def test_a_spliced_list_encodes_as_json_dumps(obj: dict[str, Any], items: list[Any]) -> None:
    whole = {**obj, "messages": items}
    texts = [compact_text(v) for v in items]
    expected = json.dumps(whole, separators=(",", ":"), ensure_ascii=False)
    assert splice_dumps(whole, ("messages",), texts) == expected
    assert splice_dumps(whole, ("messages",), [compact_text(v) for v in items]) == expected  # remembered


def test_a_value_holding_the_marker_is_encoded_whole() -> None:
    marker = _json_text._MARKER
    whole = {"a": marker, "messages": [marker]}
    texts = [compact_text(marker)]
    assert splice_dumps(whole, ("messages",), texts) == json.dumps(
        whole, separators=(",", ":"), ensure_ascii=False
    )


def test_hashing_in_pieces_is_hashing_the_whole() -> None:
    whole = '{"messages":[' + '"é🚀"' + "," + '"x"' + "]}"
    h = hashlib.sha256('{"messages":["é🚀"'.encode())
    h.update(b',"x"]}')
    assert h.hexdigest() == hashlib.sha256(whole.encode()).hexdigest()


flat_values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
flat_values |= st.sampled_from([0, 0.0, -0.0, 1, 1.0, True, False, float("nan"), "1"])
flat_keys = st.text(max_size=3) | st.sampled_from([1, True, 1.0, None, "1", "true"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.dictionaries(flat_keys, flat_values, max_size=4) | values, max_size=6))
def test_flat_texts_are_json_dumps_of_each_item(items: list[Any]) -> None:
    expected = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in items]
    assert flat_texts(items) == expected
    assert flat_texts(items) == expected  # remembered


def test_flat_texts_tell_apart_values_python_finds_equal() -> None:
    pairs = [
        ({"a": 1}, {"a": True}),
        ({"a": 0.0}, {"a": -0.0}),
        ({"a": 1}, {"a": 1.0}),
        ({1: "x"}, {True: "x"}),
    ]
    for a, b in pairs:
        assert flat_texts([a, b]) == [
            json.dumps(a, separators=(",", ":")),
            json.dumps(b, separators=(",", ":")),
        ]


messages_lists = st.lists(
    st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name"]), values, max_size=4),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(messages_lists, st.lists(values, max_size=2) | st.none())
def test_texts_looked_up_once_encode_the_body_and_the_digest(messages: list[Any], tools: Any) -> None:
    from runtime._json_text import message_texts
    from runtime._providers.openai import OpenAICompatibleProvider

    provider = OpenAICompatibleProvider("p", base_url="http://127.0.0.1:9/v1", model="m")
    texts = message_texts(messages)
    body = provider.request_body(messages, tools=tools, message_texts=texts)
    want: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        want["tools"] = tools
    assert body == json.dumps(want, separators=(",", ":"), ensure_ascii=False).encode()
    assert request_digest(messages, tools, texts) == digest({"messages": messages, "tools": tools})


def test_values_python_finds_equal_do_not_share_texts() -> None:
    from runtime._json_text import message_texts
    from runtime._providers.openai import OpenAICompatibleProvider

    provider = OpenAICompatibleProvider("p", base_url="http://127.0.0.1:9/v1", model="m")
    messages: list[Any] = [
        {"role": "user", "content": "x", "n": 1},
        {"content": "x", "role": "user", "n": 1},
        {"role": "user", "content": "x", "n": True},
        {"role": "user", "content": "x", "n": 1.0},
        {"role": "user", "content": "x", "n": -0.0},
        {"role": "user", "content": "x", "n": 0.0},
        {"role": "user", "content": ["x", {"b": "1", "a": "2"}]},
        {"role": "user", "content": ["x", {"a": "2", "b": "1"}]},
    ]
    for _ in range(2):  # the second time every text is the one remembered
        texts = message_texts(messages)
        assert len({id(e) for e in texts}) == len(messages)
        body = provider.request_body(messages, message_texts=texts)
        want = json.dumps({"model": "m", "messages": messages}, separators=(",", ":"), ensure_ascii=False)
        assert body == want.encode()
        assert request_digest(messages, None, texts) == digest({"messages": messages, "tools": None})


def test_a_message_changed_in_place_between_steps_is_keyed_again(tmp_path: Path) -> None:
    """The texts a step looks up belong to that step: a history message whose nested fields (a tool call's arguments, a
    content part) change in place between steps is sent, and digested, as it is now."""
    import runtime
    from tests.runtime.openai_server import OpenAIServer

    async def converse(base_url: str, server: Any) -> list[tuple[bytes, list[dict[str, Any]]]]:
        rt = runtime.Runtime(
            providers={"openai": {"api_key": "k", "base_url": base_url, "model": "gpt-4"}},
            config=runtime.RuntimeConfig(context_window=60_000, trace_dir=str(tmp_path)),
            tools=[lookup],
        )
        sent: list[tuple[bytes, list[dict[str, Any]]]] = []
        async with rt, rt.chat(system="You plan launches.", run_id="run") as chat:
            server.enqueue_tool_calls([("lookup", {"query": "budget"})])
            server.enqueue_text("The budget is 40k.")
            await chat.send("What is the budget?")
            call = next(m for m in chat.history if m.get("tool_calls"))
            for new in ("budget 2026", "budget ünïcode 🚀", "budget 2026"):
                call["tool_calls"][0]["function"]["arguments"] = json.dumps({"query": new})
                chat.history[1]["content"] = [{"type": "text", "text": new}]
                server.enqueue_text("Noted.")
                await chat.send(f"And {new}?")
                sent.append((server.requests[-1].body, copy.deepcopy(chat.history[:-1])))
        return sent

    with OpenAIServer() as server:
        sent = asyncio.run(converse(server.base_url, server))
    for body, history in sent:
        messages = json.loads(body)["messages"]
        assert messages == history  # everything fits: the history as it was when sent
    # Each chat call's digest is the digest of the request it sent.
    events = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text().splitlines()]
    digests = [e["llm_request_digest"] for e in events if e["event_type"] == "llm_call"][-3:]
    assert digests == [
        digest({"messages": json.loads(b)["messages"], "tools": json.loads(b)["tools"]}) for b, _ in sent
    ]


# -- the working set carried from build to build --------------------------------------------------


class _Text(str):
    """A string subclass: equal to its text, but not a plain value."""


_STEP_WORDS = "budget launch plan error failed recovery deploy beta owner Dana café 🚀 notes review".split()


def _words(rng: Any, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_STEP_WORDS) for _ in range(rng.randint(lo, hi)))


def _grow(rng: Any, history: list[Any], turns: list[int], calls: list[int]) -> None:
    """Append what a step appends: a user message, an assistant tool round, or an answer."""
    turn = turns[-1] if turns else 1
    kind = rng.random()
    if kind < 0.35:
        turn += 1
        history.append({"role": "user", "content": _words(rng, 1, 30)})
    elif kind < 0.7:
        ids = []
        for _ in range(rng.randint(1, 2)):
            calls[0] += 1
            ids.append(f"call_{calls[0]}")
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": i})},
                    }
                    for i in ids
                ],
            }
        )
        turns.append(turn)
        for i in ids:
            history.append({"role": "tool", "tool_call_id": i, "content": _words(rng, 5, 200)})
            turns.append(turn)
        return
    else:
        history.append({"role": "assistant", "content": _words(rng, 3, 80)})
    turns.append(turn)


def _change(rng: Any, history: list[Any]) -> None:
    """Change one earlier message in place, in a way a check by equality alone could miss."""
    i = rng.randrange(len(history))
    m = history[i]
    how = rng.randrange(7)
    if how == 0:
        m["content"] = _words(rng, 1, 20)
    elif how == 1:
        m["content"] = _Text(m.get("content") or "")
    elif how == 2:
        m["extra"] = rng.choice([1, True, 1.0, -0.0, 0.0, None, "1"])
    elif how == 3:
        history[i] = dict(reversed(list(m.items())))  # the same fields in another order
    elif how == 4 and m.get("tool_calls"):
        m["tool_calls"][0]["function"]["arguments"] = json.dumps({"q": _words(rng, 1, 3)})
    elif how == 5:
        m["content"] = [{"type": "text", "text": _words(rng, 1, 10)}]
    else:
        history[i] = copy.deepcopy(m)  # another object, the same value


async def _decisions_of(builder: WorkingSetBuilder, plain: bool, **kwargs: Any) -> tuple[Any, ...]:
    from runtime._trace_writer import CallableSink

    events: list[Any] = []
    writer = TraceWriter(CallableSink(events.append, as_dict=False), "run", deterministic_ids=True)
    ws = await builder.build(**kwargs)
    decision = ws.decision
    writer.emit(
        "context_decision",
        turn=1,
        step=1,
        metadata=decision.to_metadata(),
        plain_metadata=plain,
        decision_texts=(decision.decision_shapes(), decision.decision_texts()) if plain else None,
    )
    line = events[0].to_json()
    line = line.replace(events[0].timestamp, "")
    if plain:  # the texts a step's messages are sent and digested with are those messages' own
        from runtime._json_text import canonical_of, canonical_utf8, compact_of, compact_utf8, message_texts

        entries = message_texts(ws.messages, ws.message_texts)
        for m, entry in zip(ws.messages, entries, strict=True):
            assert compact_of(m, entry) == json.dumps(m, separators=(",", ":"), ensure_ascii=False)
            assert canonical_of(m, entry) == json.dumps(
                m, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
            )
        # Their UTF-8 bytes (remembered with the texts), twice: made, then read back.
        for _ in range(2):
            assert compact_utf8(ws.messages, entries) == [
                json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode() for m in ws.messages
            ]
            assert canonical_utf8(ws.messages, entries) == [
                json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()
                for m in ws.messages
            ]
        # The plain counter's count of what is sent, from the counts remembered step after step.
        assert builder.base_tokens(ws, builder.counter) == builder.counter.count_messages(ws.messages)
    sources = [None if s is None else (s[0].msg, s[1]) for s in ws.sources]
    return ws.messages, decision, line, ws.prompt_tokens, sources, ws.summary_request


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32),
    steps=st.integers(2, 14),
    ratio=st.sampled_from([0.3, 0.6, 0.7, 0.8, 0.95, 1.3]),
    force=st.sampled_from([None, None, "tail_preserve", "llm_summarize", "aggressive_truncate"]),
    keep_recent=st.sampled_from([0, 2, 6]),
    changes=st.sampled_from([0.0, 0.0, 0.3]),
)
def test_a_carried_build_is_the_build_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    steps: int,
    ratio: float,
    force: Any,
    keep_recent: int,
    changes: float,
) -> None:
    """Step after step of a growing history (tail_preserve's position term moving, the goal changing
    with each user message, pins coming and going, summaries, messages changed in place), the carried
    builder's messages, decisions and context-decision line are those of a builder that works every
    step out again."""
    import random

    from runtime._tokens import TokenCounter
    from runtime._working_set import ContextStrategy, PinBlock

    rng = random.Random(seed)
    history: list[Any] = [{"role": "system", "content": "You are careful. " + _words(rng, 3, 20)}]
    turns = [0]
    calls = [0]
    for _ in range(rng.randint(3, 40)):
        _grow(rng, history, turns, calls)
    counter = TokenCounter()
    window = max(int(counter.count_messages(history) / ratio), 3000)
    strategy = ContextStrategy(force=force, keep_recent=keep_recent, summarize_min_tokens=50)

    def builder() -> WorkingSetBuilder:
        return WorkingSetBuilder(
            TokenCounter(), context_window=window, strategy=strategy, response_reserve=200
        )

    carried, scratch = builder(), builder()
    scratch.incremental = False

    async def summarize(messages: list[dict[str, Any]]) -> str:
        return "summary: " + str(len(messages[1]["content"]))

    async def run() -> None:
        pins: list[PinBlock] = []
        for step in range(steps):
            if rng.random() < 0.3:
                pins = pins + [PinBlock(f"p_{step:08x}", rng.choice([None, "facts"]), _words(rng, 1, 12))]
            elif pins and rng.random() < 0.2:
                pins = pins[1:]
            if rng.random() < changes:
                _change(rng, history)
            kwargs = {
                "history": history,
                "tools": [],
                "pins": pins,
                "turn": step + 1,
                "step": 1,
                "summarize": summarize,
                "message_turns": turns if rng.random() < 0.8 else None,
            }
            with monkeypatch.context() as m:
                m.setattr(_json_text, "REMEMBER", False)
                expected = await _outcome(_decisions_of(scratch, False, **kwargs))
            got = await _outcome(_decisions_of(carried, True, **kwargs))
            assert got == expected
            event(f"strategy {got[1].strategy if isinstance(got, tuple) else got}")
            for _ in range(rng.randint(1, 4)):
                _grow(rng, history, turns, calls)
            history.append({"role": "user", "content": _words(rng, 1, 12)})
            turns.append(turns[-1] + 1)

    asyncio.run(run())


async def _outcome(build: Any) -> Any:
    """What a build gave, or the error it raised (a window too small for the floor)."""
    from runtime.errors import ContextOverflowError

    try:
        return await build
    except ContextOverflowError as exc:
        return f"ContextOverflowError: {exc}"


@settings(max_examples=400, deadline=None)
@given(
    index=st.integers(0, 10**6) | st.booleans(),
    role=st.text(max_size=6),
    outcome=st.sampled_from(["kept", "compressed", "dropped", "summarized"]),
    fidelity=st.none() | st.sampled_from(["L0", "L1", "L2", "L3"]) | st.text(max_size=3),
    score=st.none() | st.floats() | st.integers(0, 2) | st.booleans(),
    before=st.integers(0, 10**7) | st.floats(0, 10) | st.booleans(),
    after=st.integers(0, 10**7),
    reason=st.text(max_size=8),
)
def test_a_decision_text_is_json_dumps_of_its_shape(
    index: Any, role: str, outcome: Any, fidelity: Any, score: Any, before: Any, after: int, reason: str
) -> None:
    from runtime._working_set import MessageDecision

    d = MessageDecision._of_message(index, role, outcome, fidelity, score, before, after, reason)
    assert d._text() == json.dumps(d.to_dict(), separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_build_pauses_the_collector_only_while_it_runs(enabled: bool) -> None:
    """The cyclic collector is paused during a build, on while a summarizer is awaited, and left as
    it was found afterwards (also when the build fails)."""
    import gc
    import random

    from runtime._tokens import TokenCounter
    from runtime._working_set import ContextStrategy
    from runtime.errors import ContextOverflowError

    seen: list[bool] = []

    async def summarize(messages: list[dict[str, Any]]) -> str:
        seen.append(gc.isenabled())
        return "summary"

    history: list[Any] = [{"role": "system", "content": "You are careful."}]
    rng = random.Random(5)
    for _ in range(30):
        history.append({"role": "user", "content": _words(rng, 20, 40)})
        history.append({"role": "assistant", "content": _words(rng, 20, 40)})
    strategy = ContextStrategy(force="llm_summarize", keep_recent=2, summarize_min_tokens=10)
    builder = WorkingSetBuilder(TokenCounter(), context_window=900, strategy=strategy, response_reserve=100)
    small = WorkingSetBuilder(TokenCounter(), context_window=60, response_reserve=10)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        ws = asyncio.run(builder.build(history, turn=1, step=1, summarize=summarize))
        assert ws.summary_call_made and seen == [enabled]
        assert gc.isenabled() is enabled
        with pytest.raises(ContextOverflowError):
            asyncio.run(small.build(history, turn=1, step=1))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
