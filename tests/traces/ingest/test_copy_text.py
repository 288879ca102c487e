"""The COPY text of projection rows: each model's generated line writer writes what `copy_line` writes
for any values, of the column's type or not."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, models
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.ingest.copytext import copy_line, dumps, json_text, line_writer, model_columns
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
    attnames, _, json_cols = model_columns(model)
    return st.fixed_dictionaries({a: _json if j else _cell for a, j in zip(attnames, json_cols, strict=True)})


def _expected(model: type[models.Model], row: dict[str, Any]) -> str:
    attnames, _, json_cols = model_columns(model)
    return copy_line([json_text(row[a]) if j else row[a] for a, j in zip(attnames, json_cols, strict=True)])


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_a_line_is_what_copy_line_writes(model: type[models.Model]) -> None:
    @settings(max_examples=150, deadline=None)
    @given(row=_rows(model))
    def check(row: dict[str, Any]) -> None:
        assert line_writer(model)(row) == _expected(model, row)

    check()


def test_typed_values_take_the_inline_path_and_agree() -> None:
    row = {a: None for a in model_columns(Step)[0]}
    row.update(agent="a\tb\\c", number=3, completed=True, started_at=datetime(2026, 1, 2, tzinfo=UTC))
    row.update(tool_calls=[{"x": "\n"}], model="gpt", turn_number=2, latency_ms=None)
    assert line_writer(Step)(row) == _expected(Step, row)
    assert "a\\tb\\\\c" in line_writer(Step)(row)


def _json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON values as a JSON column holds them: a decoded event's, or built from them (string keys)."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
        max_leaves=10,
    )


_any_json = _json_values(st.text())
# What a stored event may hold: validation refuses a NUL (which jsonb refuses too) and a lone surrogate.
_stored_json = _json_values(st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\x00")))
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(value=_any_json)
def test_a_json_column_holds_the_value_the_encoder_writes(value: Any) -> None:
    assert json.loads(dumps(value)) == json.loads(_ENCODER.encode(value))


def test_a_float_not_finite_is_written_as_null() -> None:
    # Never in a stored event (validation refuses NaN and infinities); written as no JSON reader refuses.
    assert dumps([float("nan"), float("inf"), 1.5]) == "[null,null,1.5]"


def test_a_value_msgspec_refuses_is_written_by_the_encoder() -> None:
    assert dumps({True: 1, None: 2, 1.5: 3}) == _ENCODER.encode({True: 1, None: 2, 1.5: 3})
    assert dumps(["\ud800"]) == _ENCODER.encode(["\ud800"])
    assert dumps(2**80) == str(2**80)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's jsonb")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_stored_json)
def test_postgresql_stores_the_same_jsonb_from_either_text(value: Any) -> None:
    """A float's exponent is spelled otherwise by msgspec (`1e16`, `1e+16`): jsonb keeps the value."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb = %s::jsonb", [dumps(value), _ENCODER.encode(value)])
        assert cursor.fetchone() == (True,)


def test_a_cycle_is_refused_as_the_encoder_refuses_it() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(cycle)
    with pytest.raises(TypeError):
        dumps({"a": object()})
    assert dumps(["x", 1]) == '["x",1]'  # the encoder is usable after both
