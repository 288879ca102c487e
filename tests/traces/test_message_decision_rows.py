"""`message_decision_rows` (the fidelity map's read of a step's decisions, by position) gives the values
`unpack_message_decisions` gives (the pages' and the API's read, as dicts), for every stored form: our
packed table, a table stored under an older or shuffled header, and a producer's plain list."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from traces.models import (
    MESSAGE_DECISION_KEYS,
    message_decision_rows,
    pack_message_decisions,
    unpack_message_decisions,
)

values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.text(max_size=8)
    | st.floats(allow_nan=False)
)
decision = st.dictionaries(st.sampled_from([*MESSAGE_DECISION_KEYS, "extra"]), values)


def as_rows(text: str) -> list[list[Any]]:
    return [[d.get(k) for k in MESSAGE_DECISION_KEYS] for d in unpack_message_decisions(text)]


@given(st.lists(decision, max_size=6))
def test_a_packed_table_reads_the_same(decisions: list[dict[str, Any]]) -> None:
    text = pack_message_decisions([[d.get(k) for k in MESSAGE_DECISION_KEYS] for d in decisions])
    assert message_decision_rows(text) == as_rows(text)


@given(st.lists(decision, max_size=6), st.permutations(list(MESSAGE_DECISION_KEYS)), st.integers(0, 3))
def test_a_table_under_another_header_reads_the_same(
    decisions: list[dict[str, Any]], header: list[str], dropped: int
) -> None:
    cols = header[dropped:]  # an older header may lack keys; its rows may be shorter still
    text = json.dumps({"cols": cols, "rows": [[d.get(k) for k in cols][: len(cols) - 1] for d in decisions]})
    assert message_decision_rows(text) == as_rows(text)


@given(st.lists(decision, max_size=6))
def test_a_producers_plain_list_reads_the_same(decisions: list[dict[str, Any]]) -> None:
    text = json.dumps(decisions)
    assert message_decision_rows(text) == as_rows(text)


def test_nothing_stored_reads_as_no_rows() -> None:
    assert message_decision_rows(None) == message_decision_rows("") == []
