"""A context decision's counts and message rows, as the projection works them out, equal the
reading every other part of the product uses (`runtime.facts.decision_counts`, `message_decision`)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ingest import conversation_run
from runtime.facts import decision_counts
from traces.ingest.projection import (
    _PINNED,
    _counts,
    _decision_counts,
    _fast_table,
    message_decision,
    message_decisions,
)
from traces.models import pack_message_decisions

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=300),
    st.floats(allow_nan=False, min_value=-2, max_value=2),
    st.sampled_from([3.0, 2.5, "7", "kept", "compressed", "dropped", "summarized", "pinned", "KEPT", ""]),
)
DECISION = st.fixed_dictionaries(
    {},
    optional={
        "index": VALUES,
        "role": VALUES,
        "outcome": st.one_of(VALUES, st.sampled_from(["kept", "compressed", "dropped", "summarized"])),
        "fidelity": VALUES,
        "relevance_score": VALUES,
        "token_count_before": VALUES,
        "token_count_after": VALUES,
        "reason": st.one_of(VALUES, st.just("pinned")),
        "pinned": VALUES,
        "pin_id": VALUES,
    },
)
DECISIONS = st.one_of(st.lists(st.one_of(DECISION, VALUES), max_size=12), VALUES)


@settings(max_examples=300, deadline=None)
@given(decisions=DECISIONS, cc=VALUES, md_cc=VALUES, listed=st.booleans())
def test_counts_from_rows_equal_decision_counts(decisions: Any, cc: Any, md_cc: Any, listed: bool) -> None:
    d: dict[str, Any] = {"decisions": decisions}
    if listed:
        d["compressed_count"] = cc
    md = {"compressed_count": md_cc, "context_decision": d}
    rows = message_decisions(decisions)
    assert _decision_counts(rows, d, md) == decision_counts(d, md)


@settings(max_examples=300, deadline=None)
@given(decisions=DECISIONS)
def test_message_decisions_equal_the_one_by_one_reading(decisions: Any) -> None:
    expected = (
        [message_decision(x) for x in decisions if isinstance(x, dict)] if isinstance(decisions, list) else []
    )
    assert repr(message_decisions(decisions)) == repr(expected)


def test_counts_of_the_benchmark_conversations() -> None:
    events, _ = conversation_run(random.Random(3), 5)
    for ev in events:
        if ev["event_type"] == "context_decision":
            md = ev["metadata"]
            d = md["context_decision"]
            counts = _decision_counts(message_decisions(d["decisions"]), d, md)
            assert counts == decision_counts(d, md)
            assert counts.kept + counts.compressed + counts.dropped == len(d["decisions"])


# Values a producer's JSON can hold in a message decision, and the odd ones the fast table must
# spell as the general path does (or leave to it): non-finite and signed-zero floats, ints as
# floats, unhashable values, escapes and non-ASCII text, str subclasses.
class _Text(str):
    pass


TABLE_VALUES = st.one_of(
    VALUES,
    st.sampled_from(
        [0.0, -0.0, 1e300, -1e-300, float("inf"), float("-inf"), 2**70, -(2**40), 12.0, True, False]
    ),
    st.text(max_size=6),
    st.text(max_size=4).map(_Text),
    st.sampled_from(['"', "\\", "\n", "é", "\u2028", "\x00"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
TABLE_DECISION = st.fixed_dictionaries(
    {},
    optional={
        key: st.one_of(TABLE_VALUES, st.sampled_from(["kept", "compressed", "dropped", "pinned"]))
        for key in ("index", "role", "outcome", "fidelity", "relevance_score", "token_count_before",
                    "token_count_after", "reason", "pinned", "pin_id")
    },
)  # fmt: skip
OURS_PLAIN = st.fixed_dictionaries(
    {
        "index": st.integers(min_value=0, max_value=10**6),
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "outcome": st.sampled_from(["kept", "compressed", "dropped", "summarized"]),
        "fidelity": st.one_of(st.none(), st.sampled_from(["L0", "L1", "L2"])),
        "relevance_score": st.one_of(st.none(), st.floats(allow_nan=False)),
        "token_count_before": st.integers(min_value=0, max_value=10**6),
        "token_count_after": st.integers(min_value=0, max_value=10**6),
        "reason": st.text(max_size=8),
    }
)
# Ours again, some of them pinned blocks (`pinned: true` and a pin id, or only `reason "pinned"`).
OURS = st.one_of(
    OURS_PLAIN,
    st.tuples(OURS_PLAIN, st.booleans(), st.sampled_from(["pinned", "kept"])).map(
        lambda t: {**t[0], "reason": t[2], "pinned": t[1], "pin_id": "p_1"}
        if t[1]
        else {**t[0], "reason": t[2]}
    ),
)
# Hashable values of the right kind or not: ints written as floats, nulls, bools, numbers as text.
NUMBERS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.integers(-5, 10**6).map(float),
    st.floats(),
    st.just("3"),
)
TEXTS = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.text(max_size=2).map(_Text),
    st.integers(0, 2),
    st.just(1.0),
    st.booleans(),
)
LOOSE = st.fixed_dictionaries(
    {
        "index": NUMBERS, "role": TEXTS, "outcome": TEXTS, "fidelity": TEXTS, "relevance_score": NUMBERS,
        "token_count_before": NUMBERS, "token_count_after": NUMBERS, "reason": TEXTS, "pin_id": TEXTS,
    }
)  # fmt: skip
TABLES = st.one_of(
    st.lists(OURS, max_size=8),
    st.lists(st.one_of(OURS_PLAIN, LOOSE), max_size=8),
    st.lists(st.one_of(OURS, TABLE_DECISION), max_size=8),
    st.lists(st.one_of(TABLE_DECISION, TABLE_VALUES), max_size=6),
    TABLE_VALUES,
)


@settings(max_examples=600, deadline=None)
@given(decisions=TABLES, cc=VALUES, md_cc=VALUES)
def test_fast_table_equals_the_general_path(decisions: Any, cc: Any, md_cc: Any) -> None:
    """`_fast_table` (one pass, no row lists) writes the same message table and counts as packing
    `message_decisions` does, whenever it answers; it leaves pinned blocks to the general path."""
    fast = _fast_table(decisions)
    rows = message_decisions(decisions)
    if fast is None:
        return
    assert not any(r[_PINNED] for r in rows)
    table, outcomes = fast
    assert table == pack_message_decisions(rows)
    d: dict[str, Any] = {"decisions": decisions, "compressed_count": cc}
    md = {"compressed_count": md_cc, "context_decision": d}
    assert _counts(Counter(outcomes), 0, bool(outcomes), d, md) == _decision_counts(rows, d, md)


@settings(max_examples=200, deadline=None)
@given(decisions=st.lists(OURS_PLAIN, min_size=1, max_size=8))
def test_fast_table_answers_for_our_decisions(decisions: list[dict[str, Any]]) -> None:
    """Our runtime's decisions (exact ints and strings, a float or null score) take the fast table."""
    assert _fast_table(decisions) is not None


def test_fast_table_of_the_benchmark_conversations() -> None:
    events, _ = conversation_run(random.Random(5), 5)
    for ev in events:
        if ev["event_type"] == "context_decision":
            decisions = ev["metadata"]["context_decision"]["decisions"]
            fast = _fast_table(decisions)
            assert fast is not None
            assert fast[0] == pack_message_decisions(message_decisions(decisions))
