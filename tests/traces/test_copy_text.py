"""The COPY text of projection rows: each model's generated line writer writes what `_copy_line` writes
for any values, of the column's type or not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import models
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.ingest.bulk import _columns, _copy_line, _json_text, _line_writer
from traces.models import ContextDecision, Pin, PrimitiveEvent, Step, Turn

MODELS = [Turn, Step, ContextDecision, PrimitiveEvent, Pin]

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
    max_leaves=6,
)
# Any cell value a row may hold: of the column's type or not, strings with every character COPY escapes.
_cell = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\\\n\r\t"))
    | st.datetimes(timezones=st.just(UTC))
)


def _rows(model: type[models.Model]) -> st.SearchStrategy[dict[str, Any]]:
    attnames, _, json_cols = _columns(model)
    return st.fixed_dictionaries({a: _json if j else _cell for a, j in zip(attnames, json_cols, strict=True)})


def _expected(model: type[models.Model], row: dict[str, Any]) -> str:
    attnames, _, json_cols = _columns(model)
    return _copy_line([_json_text(row[a]) if j else row[a] for a, j in zip(attnames, json_cols, strict=True)])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_line_is_what_copy_line_writes(model: type[models.Model]) -> None:
    @settings(max_examples=150, deadline=None)
    @given(row=_rows(model))
    def check(row: dict[str, Any]) -> None:
        assert _line_writer(model)(row) == _expected(model, row)

    check()


def test_typed_values_take_the_inline_path_and_agree() -> None:
    row = {a: None for a in _columns(Step)[0]}
    row.update(agent="a\tb\\c", number=3, completed=True, started_at=datetime(2026, 1, 2, tzinfo=UTC))
    row.update(tool_calls=[{"x": "\n"}], model="gpt", turn_number=2, latency_ms=None)
    assert _line_writer(Step)(row) == _expected(Step, row)
    assert "a\\tb\\\\c" in _line_writer(Step)(row)


_any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda kids: st.lists(kids, max_size=3)
    | st.dictionaries(st.text() | st.integers() | st.floats() | st.booleans() | st.none(), kids, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=_any_json)
def test_json_columns_are_written_as_the_encoder_writes_them(value: Any) -> None:
    import json

    from traces.ingest.bulk import _dumps

    assert _dumps(value) == json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode(value)


def test_a_cycle_is_refused_as_the_encoder_refuses_it() -> None:
    from traces.ingest.bulk import _dumps

    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        _dumps(cycle)
    with pytest.raises(TypeError):
        _dumps({"a": object()})
    assert _dumps(["x", 1]) == '["x",1]'  # the encoder is usable after both
