"""The shortcut of the value walk (`_plain_rows`, lists of flat objects such as message decisions)
gives the same verdict and the same message as the general walk on any input."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.ingest import conversation_run
from runtime import TraceEvent
from runtime.errors import TraceFormatError
from traces.ingest import check_event
from traces.ingest import decoding as d
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
        assert (v._scan(data, 1) is None) == (levels <= d.MAX_DEPTH), levels


# --------------------------------------------------------------------------------------------------
# The body's text as proof (`_plain_body`): a body it proves skips the walk; the answers must be the
# walk's, event by event, for any body.

# JSON texts put in place of a value as they are, so the decoder sees exactly them: escapes of NUL
# and surrogates (and an escaped backslash before `u`, which is no escape), numbers around and beyond
# every limit (also written with exponents, signs and leading digits a fraction hides), NaN and
# Infinity, strings whose brackets and quotes would confuse a bracket count.
RAW_FRAGMENTS = [
    '"\\u0000"', '"a\\u0000b"', '"\\ud800"', '"\\uDC00x"', '"\\ud83d\\ude00"', '"\\\\u0000"', '"\\\\\\u0000"',
    '"\\\\ud800"', '"\\u00e9"', '"\\u001f"', '"a\\nb"', '"\\"]]]\\""', '"[[[["', '"}}}"', '"\\\\"', '"\\\\\\""',
    "9007199254740991", "9007199254740992", "-9007199254740992", "-9007199254740991", "12345678901234567890",
    "1234567890123456", "0.12345678901234567890", "1.5e300", "1e400", "-1e400", "1E+400", "1e-400",
    "1e0000000000000000005", "123456789012345678e-5", "NaN", "Infinity", "-Infinity", "-0", "0.0", "1e22",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", '{"a": {"b": [1e400]}}',
    '[1.0, 2.5, -3e-7]', '"1234567890123456789"', '"ab1234567890123456789"', '{"\\u0000": 1}',
    '{"\\ud800": 1}', '{"k": "x\\u2028y"}',
]  # fmt: skip
PLACEHOLDER = "\x01raw\x01"

ENVELOPE = st.fixed_dictionaries(
    {
        "run_id": st.one_of(st.sampled_from(["r1", "r/2", "r\x00", "", "x" * 201]), st.text(max_size=6)),
        "step_id": st.one_of(st.just("s1"), st.text(max_size=6), st.integers(), st.none()),
        "timestamp": TIMESTAMPS,
        "event_type": st.sampled_from(["turn", "context_decision", "x" * 101]),
    },
    optional={
        "parent_step_id": st.one_of(st.none(), st.text(max_size=4), st.just("p" * 201)),
        "llm_latency_ms": st.one_of(st.none(), st.integers(min_value=-5, max_value=2**40), st.floats()),
        "model": st.one_of(st.none(), st.text(max_size=4), st.integers()),
        "tool_call": st.one_of(st.none(), st.dictionaries(KEYS, SCALARS, max_size=2), st.integers()),
        # The typed decode (`_event_of`) takes what has the envelope's types and declines the rest.
        "role": st.one_of(
            st.none(), st.just("assistant"), st.booleans(), st.lists(st.integers(), max_size=1)
        ),
        "task_id": st.one_of(st.none(), st.text(max_size=3), st.floats(allow_nan=False)),
        "stop_detail": st.one_of(st.none(), st.just("x\n\u00e9"), st.dictionaries(KEYS, SCALARS, max_size=1)),
        "budgets": st.one_of(
            st.none(), st.dictionaries(KEYS, SCALARS, max_size=2), st.lists(SCALARS, max_size=2)
        ),
        "llm_response_digest": st.one_of(st.none(), st.just("sha256:ab")),
        "other": SCALARS,  # a key beside the envelope's: kept in `extra`
        "Model": st.text(max_size=2),
    },
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A batch body: events with hostile values, some raw JSON fragments in place, written with any
    of json.dumps's spellings (ASCII or not, with or without spaces, indented)."""
    n = draw(st.integers(min_value=0, max_value=4))
    events: list[Any] = []
    raws: list[str] = []
    for _ in range(n):
        ev: Any = draw(ENVELOPE)
        md: dict[str, Any] = {"turn": draw(st.one_of(st.integers(min_value=-2, max_value=2**31), st.none()))}
        md["extra"] = draw(JSONISH)
        md["deep"] = _deep(draw(st.integers(min_value=0, max_value=17)), draw(SCALARS))
        if draw(st.booleans()):
            md["raw"] = PLACEHOLDER
            raws.append(draw(st.sampled_from(RAW_FRAGMENTS)))
        ev["metadata"] = md
        events.append(draw(st.one_of(st.just(ev), st.just(ev), SCALARS)))
    style = draw(st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1}, {"ensure_ascii": False}]))
    text = json.dumps({"events": events}, **style)  # NaN / Infinity written as Python's json does
    for raw in raws:
        text = text.replace(json.dumps(PLACEHOLDER), raw, 1)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate written raw: not UTF-8


def _answers(body: bytes | str, *, walk: bool) -> Any:
    try:
        payload, raws = d.parse_batch(body)
    except ValueError as exc:
        return "not JSON", str(exc)
    events = payload.get("events") if isinstance(payload, dict) else None
    if not isinstance(events, list):
        return "not a batch", repr(payload)
    if walk:
        # The body decoded element by element, as plain values, and walked: the reference.
        with mock.patch.object(d, "_fast_batch", return_value=None):
            payload, raws = d.parse_batch(body)
        events = payload["events"]
        raws = None if raws is None else list(raws)  # not parse_batch's own list: the walk runs
    ok, bad = v.check_events(events, raw_texts=raws)
    return [(c.index, repr(c.event), c.raw) for c in ok], [(r.index, r.error, r.field) for r in bad]


@settings(max_examples=300, deadline=None)
@given(body=bodies())
def test_a_proved_body_gives_the_walks_answers(body: bytes) -> None:
    assert repr(_answers(body, walk=False)) == repr(_answers(body, walk=True))


@settings(max_examples=100, deadline=None)
@given(body=bodies())
def test_the_proof_is_only_for_bytes(body: bytes) -> None:
    """A `str` body or a subclass of `bytes` is walked as before; a `bytearray` is read as its bytes."""

    class Body(bytes):
        pass

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    for other in (Body(body), text):
        if other is None:
            continue
        try:
            _, raws = d.parse_batch(other)
        except ValueError:
            continue
        assert raws is None or raws.__class__ is list
    assert repr(_answers(bytearray(body), walk=False)) == repr(_answers(body, walk=True))


def test_every_hostile_fragment_is_a_doubt() -> None:
    """Each fragment that the walk refuses (or that a bracket count or a digit run could misjudge)
    leaves the body unproved, and the walk answers as before."""
    base = {"run_id": "r", "step_id": "s", "event_type": "turn", "timestamp": "2026-11-30T00:00:00Z"}
    for raw in RAW_FRAGMENTS:
        text = json.dumps({"events": [{**base, "metadata": {"v": PLACEHOLDER}}]})
        body = text.replace(json.dumps(PLACEHOLDER), raw).encode()
        walked = _answers(body, walk=True)
        assert repr(_answers(body, walk=False)) == repr(walked), raw
        _, raws = d.parse_batch(body)
        if walked[1]:  # the walk refused it: the body must not have been proved
            assert raws.__class__ is not d.BodyTexts, raw


def test_the_usual_bodies_are_proved() -> None:
    """Not vacuous: the bodies of bench/ingest.py's mixes (ASCII or not) take the short way."""
    from bench.ingest import small_run

    rng = random.Random(3)
    conv, _ = conversation_run(rng, 4)
    for events in (small_run(rng, 40), conv):
        for style in ({}, {"ensure_ascii": False, "separators": (",", ":")}):
            body = json.dumps({"events": events}, **style).encode()
            payload, raws = d.parse_batch(body)
            assert raws.__class__ is d.BodyTexts
            assert raws.plain_events is payload["events"]
            ok, bad = v.check_events(payload["events"], raw_texts=raws)
            assert not bad and len(ok) == len(events)
    # Escaped text, strings with brackets, a nesting right at the limit: still proved.
    md: Any = {"text": 'line\n"quoted" [x] {y} \\ é', "args": '{"a": [1, {"b": "}"}]}'}
    for _ in range(d.MAX_DEPTH - 2):
        md = {"a": md}
    ev = {
        "run_id": "r",
        "step_id": "s",
        "event_type": "turn",
        "timestamp": "2026-11-30T00:00:00Z",
        "metadata": md,
    }
    _, raws = d.parse_batch(json.dumps({"events": [ev]}).encode())
    assert raws.__class__ is d.BodyTexts
    md = {"a": md}  # one level more
    ev["metadata"] = md
    body = json.dumps({"events": [ev]}).encode()
    _, raws = d.parse_batch(body)
    assert raws.__class__ is not d.BodyTexts
    assert (
        _answers(body, walk=False)[1][0][1]
        == f"'metadata{'.a' * (d.MAX_DEPTH - 1)}' is nested more than {d.MAX_DEPTH} levels deep"
    )


# --------------------------------------------------------------------------------------------------
# msgspec's decoding of the usual body (`_fast_batch`): the same values, texts and proof as the
# element-by-element scan with json's decoder, for any body; it declines what it cannot match.


def _parsed(body: bytes, *, fast: bool) -> Any:
    """`parse_batch(body)` with msgspec (`fast`, as the ingest runs) or by the element-by-element scan."""
    scan = contextlib.nullcontext() if fast else mock.patch.object(d, "_fast_batch", return_value=None)
    with scan:
        try:
            return d.parse_batch(body)
        except ValueError as exc:
            return "not JSON", str(exc)


def _shown(parsed: Any, typed: list[bool]) -> Any:
    """`parse_batch`'s answer as compared: the events `typed` marks (the ones msgspec gave as a
    `TraceEvent`, `_event_of`) shown as that event, or for the scan's value as the event
    `TraceEvent.from_dict` reads from it (so it must read one)."""
    payload, raws = parsed
    if payload == "not JSON":
        return parsed
    plain = isinstance(raws, d.BodyTexts) and raws.plain_events is payload.get("events")
    if typed:
        shown = [_event_shown(e) if t else e for e, t in zip(payload["events"], typed, strict=True)]
        payload = {**payload, "events": shown}
    return repr(payload), None if raws is None else list(raws), type(raws).__name__, plain


def _event_shown(event: Any) -> Any:
    if event.__class__ is not TraceEvent:
        event = TraceEvent.from_dict(event)
    return ("TraceEvent", repr(event), event.timestamp_dt)


def _fast_and_scan(body: bytes) -> tuple[Any, Any]:
    """What msgspec's decoding and the scan give for `body`, shown alike."""
    fast, scan = _parsed(body, fast=True), _parsed(body, fast=False)
    events = fast[0].get("events") if isinstance(fast[0], dict) else None
    typed = [e.__class__ is TraceEvent for e in events] if isinstance(events, list) else []
    return _shown(fast, typed), _shown(scan, typed)


@settings(max_examples=300, deadline=None)
@given(body=bodies(), floats=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4))
def test_msgspec_decodes_a_body_as_the_scan_does(body: bytes, floats: list[float]) -> None:
    # Floats as written by repr and in other spellings (exponents, trailing zeros), which must round
    # to the same float whichever parser reads them.
    spellings = [repr(x) for x in floats] + [f"{x:.17e}" for x in floats] + [f"{x:.3E}" for x in floats]
    if spellings and body.startswith(b'{"events": [') and body != b'{"events": []}':
        extra = json.dumps({"run_id": "r", "step_id": "s", "event_type": "turn",
                            "timestamp": "2026-11-30T00:00:00Z", "metadata": {"f": PLACEHOLDER}})  # fmt: skip
        extra = extra.replace(json.dumps(PLACEHOLDER), "[" + ", ".join(spellings) + "]")
        body = b'{"events": [' + extra.encode() + b", " + body[len(b'{"events": [') :]
    fast, scan = _fast_and_scan(body)
    assert fast == scan


def test_msgspec_declines_what_json_reads_otherwise() -> None:
    """NaN, Infinity, a float out of range, a lone surrogate escape, another key beside `events`, a
    body nested past the limit: the scan answers (the same answers as without msgspec)."""
    base = (
        '{"run_id": "r", "step_id": "s", "event_type": "turn", "timestamp": "2026-11-30T00:00:00Z", "v": %s}'
    )
    for raw in ["NaN", "-Infinity", "1e400", '"\\ud800"', "[" * 600 + "]" * 600]:
        body = ('{"events": [' + base % raw + "]}").encode()
        assert d._fast_batch(body) is None, raw
    for body in [
        b'{"events": [], "more": 1}',
        b'{"other": []}',
        b'{"events": {}}',
        b"[]",
        b'{"events": [1,]}',
    ]:
        assert d._fast_batch(body) is None, body
        fast, scan = _fast_and_scan(body)
        assert fast == scan


def test_msgspec_reads_repeated_keys_and_odd_spellings_as_json_does() -> None:
    event = (
        '{"run_id": "r", "step_id": "s", "run_id": "r2", "event_type": "turn", "timestamp": '
        '"2026-11-30T00:00:00-00:16:08", "metadata": {"x": 1, "y": [1E2, -0, -0.0, 1e-400, 5e-324, '
        '0.1e1, "\\u00e9\\n"], "x": {"x": 2}}}'
    )
    for body in ['{"events": [' + event + "]}", '{ "events" :[ ' + event + " , " + event + " ] }\n"]:
        data = body.encode()
        assert d._fast_batch(data) is not None
        fast, scan = _fast_and_scan(data)
        assert fast == scan


def test_msgspec_takes_the_usual_bodies() -> None:
    """Not vacuous: bench/ingest.py's mixes (ASCII or not) are decoded by msgspec, with every
    event's exact text."""
    from bench.ingest import small_run

    rng = random.Random(5)
    conv, _ = conversation_run(rng, 4)
    for events in (small_run(rng, 40), conv):
        for style in ({}, {"ensure_ascii": False, "separators": (",", ":")}, {"indent": 2}):
            body = json.dumps({"events": events}, **style).encode()
            fast = d._fast_batch(body)
            assert fast is not None
            payload, texts = fast
            # Every event of the usual shape comes out parsed (`_event_of`), as `from_dict` reads it.
            assert all(e.__class__ is TraceEvent for e in payload["events"])
            assert payload["events"] == [TraceEvent.from_dict(e) for e in events]
            assert texts.plain_events is payload["events"]
            assert [json.loads(t) for t in texts] == events and all(t in body.decode() for t in texts)
