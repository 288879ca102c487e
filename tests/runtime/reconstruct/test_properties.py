"""Properties of the reconstruction over generated runs: a run whose calls each receive the previous
input plus new messages keeps everything; the result is deterministic; every message of the history
has exactly one state per call and every input message exactly one place; and on runs made by
dropping, cutting and restoring messages of distinct texts, each state is the one the generator
made."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.reconstruct import Reconstruction, reconstruct

from .helpers import assistant, call, system, user

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def _text(i: int, rng: random.Random) -> str:
    # "q12z" is no substring of "q123z": every text, and every cut of one, names its message alone.
    return f"q{i}z " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 30)))


def _count(text: str) -> int:
    return len(text.split())  # a cheap stand-in for tiktoken: the properties do not need exact counts


def growing(seed: int, n_calls: int, tools: bool) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    n = 0
    history: list[dict[str, Any]] = [system("You are terse.")]
    calls = []
    for k in range(n_calls):
        n += 1
        history.append(user(_text(n, rng)))
        if tools and rng.random() < 0.5:
            n += 1
            tc = {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": f"t{n}", "name": "look", "arguments": {"q": n}}],
            }
            result = {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": f"t{n}", "result": _text(n, rng)}],
            }
            calls.append(call(f"c{k}a", list(history), [tc]))
            history += [tc, result]
        n += 1
        answer = assistant(_text(n, rng))
        calls.append(call(f"c{k}", list(history), [answer]))
        history.append(answer)
    return calls


def _check_each_message_once(r: Reconstruction, calls: list[dict[str, Any]]) -> None:
    first_seen: dict[str, int] = {}
    order = {c["id"]: k for k, c in enumerate(calls)}
    for m in r.messages:
        first_seen[m.message_id] = order[m.first_call_id]
    outputs = {m.message_id for m in r.messages if m.origin == "output"}
    for c in r.calls:
        if c.kind != "turn":
            continue
        ids = [s.message_id for s in c.states]
        assert len(ids) == len(set(ids))
        expected = {
            m for m, k in first_seen.items() if k < c.position or (k == c.position and m not in outputs)
        }
        assert set(ids) == expected
        assert sorted(s.position for s in c.states if s.position is not None) == list(range(c.messages_in))
        assert [s.history_index for s in c.states] == list(range(len(c.states)))


@_SETTINGS
@given(seed=st.integers(0, 10_000), n_calls=st.integers(1, 12), tools=st.booleans())
def test_a_growing_run_keeps_everything(seed: int, n_calls: int, tools: bool) -> None:
    calls = growing(seed, n_calls, tools)
    r = reconstruct(calls, count_text=_count)
    assert r.compactions == ()
    for c, raw in zip(r.calls, calls, strict=True):
        assert c.kind == "turn"
        if c.position == 0:
            assert {s.status for s in c.states} == {"new"}
            continue
        prev_len = len(calls[c.position - 1]["input_messages"]) + len(
            calls[c.position - 1]["output_messages"]
        )
        by_pos = {s.position: s.status for s in c.states}
        assert [by_pos[p] for p in range(prev_len)] == ["kept"] * prev_len
        assert [by_pos[p] for p in range(prev_len, len(raw["input_messages"]))] == ["new"] * (
            len(raw["input_messages"]) - prev_len
        )
    _check_each_message_once(r, calls)


# A run made by a random context policy, with the states it implies.
Truth = dict[str, dict[int, str]]  # call id → history index → status


def edited(seed: int, n_calls: int, p_drop: float, p_cut: float) -> tuple[list[dict[str, Any]], Truth]:
    """Each call: the system prompt, then every earlier message kept, cut (its first half and "…"),
    or left out at random, then the last answer and a new question. The truth follows from what the
    previous call had."""
    rng = random.Random(seed)
    texts: list[tuple[str, str]] = [("system", "You are terse and you never guess.")]
    cuts: dict[int, str] = {}
    calls: list[dict[str, Any]] = []
    truth: Truth = {}
    prev: dict[int, str] = {}  # history index → "full" / "cut" in the previous call (its answer: full)
    n = 0
    for k in range(n_calls):
        n += 1
        texts.append(("user", _text(n, rng)))
        question = len(texts) - 1
        inputs: list[dict[str, Any]] = [system(texts[0][1])]
        now: dict[int, str] = {0: "full"}
        states: dict[int, str] = {0: "kept" if k else "new"}
        for h in range(1, question):
            role, body = texts[h]
            last_answer = h == question - 1
            roll = rng.random()
            if last_answer or roll >= p_drop + p_cut:
                inputs.append({"role": role, "parts": [{"type": "text", "content": body}]})
                now[h] = "full"
                states[h] = "kept" if h in prev else "restored"
            elif roll < p_drop:
                states[h] = "dropped"
            else:
                cut = cuts.setdefault(h, body[: len(body) // 2] + "…")
                inputs.append({"role": role, "parts": [{"type": "text", "content": cut}]})
                now[h] = "cut"
                states[h] = "shortened" if h in prev else "restored"
        inputs.append(user(texts[question][1]))
        states[question] = "new"
        now[question] = "full"
        n += 1
        answer = _text(n, rng)
        calls.append(call(f"c{k}", inputs, [assistant(answer)]))
        texts.append(("assistant", answer))
        now[len(texts) - 1] = "full"  # the answer counts as seen by the next call
        truth[f"c{k}"] = states
        prev = now
    return calls, truth


@_SETTINGS
@given(
    seed=st.integers(0, 10_000),
    n_calls=st.integers(2, 14),
    p_drop=st.floats(0, 0.5),
    p_cut=st.floats(0, 0.4),
)
def test_it_finds_what_a_random_policy_did(seed: int, n_calls: int, p_drop: float, p_cut: float) -> None:
    calls, truth = edited(seed, n_calls, p_drop, p_cut)
    r = reconstruct(calls, count_text=_count)
    for c in r.calls:
        got = {s.history_index: s.status for s in c.states}
        assert got == truth[c.call_id], c.call_id
    _check_each_message_once(r, calls)


@_SETTINGS
@given(seed=st.integers(0, 10_000), n_calls=st.integers(2, 10))
def test_it_is_deterministic(seed: int, n_calls: int) -> None:
    calls, _ = edited(seed, n_calls, 0.3, 0.2)
    assert reconstruct(calls, count_text=_count).to_dict() == reconstruct(calls, count_text=_count).to_dict()
