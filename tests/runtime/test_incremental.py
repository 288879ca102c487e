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
from hypothesis import HealthCheck, given, settings
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
