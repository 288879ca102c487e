"""`runtime.otlp.run_key_of`: the run key a server files a span under before it derives the run is the
one `normalize_span` gives it, whatever else the span carries."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.otlp import Span, normalize_span, run_key_of


def _span(attributes: dict[str, Any]) -> Span:
    return {
        "trace_id": "5b8efff798038103d269b633813fc60c",
        "span_id": "0000000000000001",
        "parent_span_id": None,
        "name": "chat",
        "kind": 3,
        "start_time": 1,
        "end_time": 2,
        "status": {"code": 0, "message": ""},
        "attributes": attributes,
        "events": [],
        "links": [],
        "resource": {},
        "scope": {"name": "", "version": ""},
    }  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"gen_ai.conversation.id": "c-1", "session.id": "s-1"}, ("c-1", "gen_ai.conversation.id")),
        ({"session.id": "s-1", "gen_ai.input.messages": "not json"}, ("s-1", "session.id")),
        ({"gen_ai.conversation.id": "", "session.id": "s-2"}, ("s-2", "session.id")),
        ({"gen_ai.conversation.id": 42}, ("5b8efff798038103d269b633813fc60c", "trace_id")),  # not a string
        ({"llm.input_messages.0.message.role": "user"}, ("5b8efff798038103d269b633813fc60c", "trace_id")),
    ],
)
def test_it_gives_the_run_key_normalize_span_gives(
    attributes: dict[str, Any], expected: tuple[str, str]
) -> None:
    span = _span(attributes)
    normalized = normalize_span(span)

    assert run_key_of(span) == expected == (normalized["run_key"], normalized["run_key_source"])
    assert span["attributes"] == attributes  # read, not taken
