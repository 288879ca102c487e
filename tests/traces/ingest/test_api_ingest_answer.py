"""The ingest view's answers are rendered by msgspec (`IngestAnswerRenderer`) into exactly the text DRF's
JSON renderer writes: for any answer of their shape (hypothesis), and for real answers of the view."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import JSONRenderer

from tests.traces.helpers import sample_events
from traces.ingest.api import IngestAnswerRenderer

# Every character, the line separators DRF escapes and the ones JSON escapes among them.
_text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('\u2028\u2029"\\\n\t\x00\x7f'))
_answers = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _text,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_text, kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(answer=_answers)
def test_any_answer_of_their_shape_is_the_text_drf_writes(answer: Any) -> None:
    assert IngestAnswerRenderer().render(answer) == JSONRenderer().render(answer)


def test_an_error_detail_and_an_indented_answer_are_drfs_text() -> None:
    detail = {"detail": ErrorDetail("Invalid or revoked API key.", code="authentication_failed")}
    assert IngestAnswerRenderer().render(detail) == JSONRenderer().render(detail)
    indented = "application/json; indent=2"
    assert IngestAnswerRenderer().render({"a": [1]}, indented) == JSONRenderer().render({"a": [1]}, indented)
    assert IngestAnswerRenderer().render(None) == b""


def test_the_views_answers_are_drfs_text(api_client: Client) -> None:
    events = sample_events()
    events[3] = {**events[3], "timestamp": "yesterday \u2028"}
    for body in ({"events": events}, {"events": events[:5]}, {"events": "no"}):
        r = api_client.post("/api/v1/ingest", data=json.dumps(body), content_type="application/json")
        assert r.status_code in (200, 207, 400)
        assert r.content == JSONRenderer().render(json.loads(r.content))
        assert b"\\u2028" in r.content or r.status_code != 207
