"""The shortcut of the value walk (`_plain_rows`, lists of flat objects such as message decisions)
gives the same verdict and the same message as the general walk on any input."""

from __future__ import annotations

import json
import random
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ingest import conversation_run
from runtime.errors import TraceFormatError
from traces.ingest import check_event
from traces.ingest import validation as v

# Scalars with every kind of problem the walk looks for: NUL, lone surrogates (alone and in pairs),
# integers at and beyond ±(2**53 − 1), huge integers, NaN and ±Infinity, and non-ASCII text.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from([2**53 - 1, 2**53, -(2**53 - 1), -(2**53), 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["ok", "a\x00b", "\ud800", "x\udfff", "\ud83d\ude00", "é", "kept", "pinned", ""]),
)
KEYS = st.one_of(
    st.sampled_from(["index", "role", "outcome", "reason", "k\x00", "\udc00", "é"]), st.text(max_size=4)
)


def _rows(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of objects that mostly share their keys (the shape the shortcut is for)."""

    @st.composite
    def build(draw: st.DrawFn) -> list[dict[str, Any]]:
        keys = draw(st.lists(KEYS, min_size=1, max_size=5, unique=True))
        n = draw(st.integers(min_value=0, max_value=6))
        rows: list[Any] = [{k: draw(values) for k in keys} for _ in range(n)]
        odd = draw(st.booleans())
        if rows and odd:
            # One odd row: other keys, a missing key, or not an object at all.
            i = draw(st.integers(min_value=0, max_value=len(rows) - 1))
            rows[i] = draw(st.one_of(st.dictionaries(KEYS, values, max_size=3), values))
        return rows

    return build()


JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4), _rows(inner)
    ),
    max_leaves=40,
)


def _deep(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [{"a": leaf}]
    return leaf


def _general(value: Any) -> Any:
    """`_scan` without the shortcut: the reference."""
    with mock.patch.object(v, "_plain_rows", return_value=False):
        return v._scan(value, 1)


@settings(max_examples=200, deadline=None)
@given(value=JSONISH, depth=st.integers(min_value=0, max_value=20))
def test_the_shortcut_and_the_general_walk_agree(value: Any, depth: int) -> None:
    data = {"metadata": {"decisions": _deep(depth, value)}}
    assert v._scan(data, 1) == _general(data)


@settings(max_examples=200, deadline=None)
@given(rows=_rows(SCALARS))
def test_a_list_the_shortcut_accepts_has_no_problem(rows: list[Any]) -> None:
    if v._plain_rows(rows):
        assert _general({"rows": rows}) is None


def _outcome(data: Any) -> tuple[str, Any]:
    try:
        ev = check_event(data)
    except TraceFormatError as exc:
        return "rejected", (exc.reason, exc.field)
    return "ok", (ev.run_id, ev.step_id, ev.timestamp, ev.metadata)


TIMESTAMPS = st.one_of(
    st.sampled_from(
        ["2026-11-30T00:00:00+00:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00", "not a time", "",
         "2026-02-30T00:00:00Z", "2026-11-30T00:00:00"]
    ),
    st.text(max_size=30),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(rows=_rows(SCALARS), extra=JSONISH, ts=TIMESTAMPS, depth=st.integers(min_value=0, max_value=34))
def test_check_event_answers_the_same_with_and_without_the_shortcut(
    rows: list[Any], extra: Any, ts: str, depth: int
) -> None:
    data = {
        "run_id": "r1", "step_id": "s1", "timestamp": ts, "event_type": "context_decision", "role": "system",
        "metadata": {"context_decision": {"decisions": rows}, "extra": extra, "deep": _deep(depth, rows)},
    }  # fmt: skip
    fast = _outcome(data)
    with mock.patch.object(v, "_plain_rows", return_value=False):
        general = _outcome(data)
    assert repr(fast) == repr(general)  # repr: NaN != NaN, but prints the same


def test_the_shortcut_takes_the_usual_message_decisions() -> None:
    """Not vacuous: real message decisions (bench/ingest.py mix (b)) go the short way."""
    events, _ = conversation_run(random.Random(1), 3)
    for ev in events:
        if ev["event_type"] == "context_decision":
            rows = json.loads(json.dumps(ev))["metadata"]["context_decision"]["decisions"]
            assert v._plain_rows(rows)
            rows[3]["role"] = "a\x00"
            assert not v._plain_rows(rows)


def test_a_problem_inside_message_decisions_is_still_named() -> None:
    events, _ = conversation_run(random.Random(2), 1)
    data = json.loads(json.dumps(events[0]))
    data["metadata"]["context_decision"]["decisions"][5]["token_count_before"] = 2**60
    try:
        check_event(data)
    except TraceFormatError as exc:
        assert exc.field == "metadata.context_decision.decisions[5].token_count_before"
    else:  # pragma: no cover - the assertion above is the test
        raise AssertionError("a huge integer among message decisions was let through")


def test_rows_at_the_depth_limit() -> None:
    """A list of objects whose objects sit at the deepest level allowed, and one level deeper."""
    for levels in range(28, 36):
        data: Any = [{"role": "user", "n": 1}, {"role": "tool", "n": 2}]
        for _ in range(levels - 2):  # `data` is a list at level `levels - 1` once wrapped
            data = {"a": data}
        assert v._scan(data, 1) == _general(data), levels
        assert (v._scan(data, 1) is None) == (levels <= v.MAX_DEPTH), levels
