"""`request_digest` (the llm_call's `llm_request_digest`, with each message's canonical JSON remembered
across steps) gives exactly `digest({"messages": ..., "tools": ...})`, whatever the values."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime._trace_writer import digest, request_digest

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from([0, 0.0, -0.0, 1, 1.0, True, False, "1", "true", ""])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    | st.tuples(inner, inner),
    max_leaves=12,
)
messages = st.lists(
    st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "x"]), values), max_size=6
)


@settings(max_examples=400, deadline=None)
@given(messages, st.none() | st.lists(values, max_size=3))
def test_it_gives_the_digest_of_the_whole_request(msgs: list[dict[str, Any]], tools: Any) -> None:
    expected = digest({"messages": msgs, "tools": tools})
    assert request_digest(msgs, tools) == expected
    assert request_digest(msgs, tools) == expected  # again, from the remembered texts


def test_it_tells_apart_values_python_finds_equal() -> None:
    # 1, 1.0 and True are equal (and hash alike) in Python, but their JSON differs; so do 0.0 and -0.0.
    for a, b in ((1, 1.0), (1, True), (0.0, -0.0), (0, False)):
        first = request_digest([{"role": "user", "content": a}], None)
        second = request_digest([{"role": "user", "content": b}], None)
        assert first == digest({"messages": [{"role": "user", "content": a}], "tools": None})
        assert second == digest({"messages": [{"role": "user", "content": b}], "tools": None})
        assert first != second


def test_it_keys_a_message_by_its_content_not_its_identity() -> None:
    msg = {"role": "user", "content": "hello"}
    before = request_digest([msg], [])
    msg["content"] = "changed in place"
    assert request_digest([msg], []) == digest({"messages": [msg], "tools": []}) != before


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 300), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 3)), max_size=8))
def test_a_request_that_differs_from_the_last_resumes_where_they_agree(n: int, edits: list[Any]) -> None:
    """Step after step, messages inserted, dropped, changed or added anywhere (the hash resumed from
    the last checkpoint both requests share): always the digest of the whole request."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"message {i}"} for i in range(n)]
    assert request_digest(msgs, None) == digest({"messages": msgs, "tools": None})
    for pos, how in edits:
        msgs = list(msgs)
        i = pos % (len(msgs) + 1)
        if how == 0:
            msgs.insert(i, {"role": "assistant", "content": f"inserted {pos}"})
        elif how == 1 and msgs:
            del msgs[min(i, len(msgs) - 1)]
        elif how == 2 and msgs:
            msgs[min(i, len(msgs) - 1)] = {"role": "tool", "content": f"changed {pos}"}
        else:
            msgs.append({"role": "user", "content": f"added {pos}"})
        assert request_digest(msgs, []) == digest({"messages": msgs, "tools": []})
