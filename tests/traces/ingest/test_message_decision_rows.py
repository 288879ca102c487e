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


# Every kind of value a row may hold, those validation refuses included (a caller of our own could
# pass them): integers of any size, lone surrogates, control and separator characters; and in the
# score's column (the one float of a message decision) any float, NaN and the infinities included.
not_float = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "a\x00b", "\x1f\u2028\u2029", "é😀", '"\\', 10**400, "null"])
)
score = st.none() | st.floats() | st.integers() | st.sampled_from([-0.0, 1e300, 5e-324])
SCORE = MESSAGE_DECISION_KEYS.index("relevance_score")


@st.composite
def rows_of_any_value(draw: st.DrawFn) -> list[list[Any]]:
    n = len(MESSAGE_DECISION_KEYS)
    return [
        [draw(score) if k == SCORE else draw(not_float) for k in range(n)]
        for _ in range(draw(st.integers(0, 6)))
    ]


@given(rows_of_any_value())
def test_a_packed_table_holds_the_values_json_would_write(rows: list[list[Any]]) -> None:
    """msgspec writes the table (`pack_message_decisions`); it reads back as the values `json` would
    have written, exactly (floats by their repr, -0.0 included; NaN and infinities as `json` writes
    them)."""
    text = pack_message_decisions(rows)
    written = json.loads(text)
    assert written["cols"] == list(MESSAGE_DECISION_KEYS)
    expected = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    assert repr(written["rows"]) == repr(json.loads(expected))


def test_the_usual_table_is_the_text_json_writes() -> None:
    rows = [[i, "user", "compressed", "L1", 0.1 * i, 40 + i, 12, "tail_preserve_middle_compressed", False, None, i]
            for i in range(50)]  # fmt: skip
    rows[3][8], rows[3][9] = True, "p_00000001"
    text = pack_message_decisions(rows)
    assert (
        text
        == '{"cols":'
        + json.dumps(list(MESSAGE_DECISION_KEYS), separators=(",", ":"))
        + ',"rows":'
        + json.dumps(rows, separators=(",", ":"))
        + "}"
    )


@given(
    st.lists(
        st.lists(values | st.floats() | st.integers() | st.sampled_from(["\ud800", "a\udfffb"]), max_size=11),
        max_size=4,
    )
)
def test_a_stored_text_reads_as_json_reads_it(rows: list[list[Any]]) -> None:
    """Both reads decode with msgspec where it can, with `json` where msgspec refuses (NaN, Infinity,
    a number beyond a float, a lone surrogate): the values are `json.loads`'s either way."""
    head = '{"cols":' + json.dumps(list(MESSAGE_DECISION_KEYS)) + ',"rows":'
    for text in (
        head + json.dumps(rows) + "}",
        json.dumps([dict(zip(MESSAGE_DECISION_KEYS, r, strict=False)) for r in rows]),
    ):
        value = json.loads(text)
        dicts = (
            value
            if isinstance(value, list)
            else [dict(zip(value["cols"], r, strict=False)) for r in value["rows"]]
        )
        expected = [[d.get(k) for k in MESSAGE_DECISION_KEYS] for d in dicts]
        assert json.dumps(unpack_message_decisions(text)) == json.dumps(dicts)  # NaN != NaN: as text
        got = message_decision_rows(text)
        assert json.dumps(got) == json.dumps(expected)
        assert [[type(v) for v in r] for r in got] == [[type(v) for v in r] for r in expected]


def test_what_msgspec_refuses_is_read_by_json() -> None:
    head = '{"cols":' + json.dumps(list(MESSAGE_DECISION_KEYS)) + ',"rows":'
    for value, expected in (("NaN", "nan"), ("1e400", "inf"), ('"\\ud800"', "'\\ud800'")):
        text = head + f"[[0,{value},null,null,null,null,null,null,false,null,0]]" + "}"
        assert repr(message_decision_rows(text)[0][1]) == expected
