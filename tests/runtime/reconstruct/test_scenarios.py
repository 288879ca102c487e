"""Hand-written runs with the decisions expected, written by hand: each test says which message is
which id (ids count up in the order messages are first seen: a call's new input in order, then its
answer) and what each call should say about each of them."""

from __future__ import annotations

import doctest

import pytest

import runtime.reconstruct
from runtime.errors import TraceFormatError
from runtime.reconstruct import _forms, _lost, _model, _records, reconstruct

from .helpers import assistant, call, system, tool_call, tool_result, user, user_tool_result, view

S = system("You are a travel assistant.")
U1 = user("Plan a trip to Lisbon in May for two people.")
A1 = assistant("Here is a plan: fly TAP from Paris, stay in Alfama, visit Belem and the Oceanarium.")
U2 = user("Add a day trip to Sintra.")
A2 = assistant("Sintra added: take the train from Rossio, see Pena Palace and Quinta da Regaleira.")
U3 = user("What should we pack?")
A3 = assistant("Light layers, comfortable shoes and a rain jacket for May.")
U4 = user("And which restaurants near Alfama?")
A4 = assistant("Try Taberna da Rua das Flores and Cervejaria Ramiro.")
U5 = user("Thanks, book nothing yet.")


def growing_run() -> list[dict]:
    """Three calls, each the previous input + its answer + a new user message."""
    return [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, U1, A1, U2, A2, U3], [A3]),
    ]


def test_it_keeps_a_growing_conversation() -> None:
    r = reconstruct(growing_run())
    # c1: S=m1, U1=m2; answer A1=m3. c2: U2=m4; answer A2=m5. c3: U3=m6.
    assert view(r.call("c1")) == [("m1", "new", 0), ("m2", "new", 1)]
    assert view(r.call("c2")) == [("m1", "kept", 0), ("m2", "kept", 1), ("m3", "kept", 2), ("m4", "new", 3)]
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "kept", 1),
        ("m3", "kept", 2),
        ("m4", "kept", 3),
        ("m5", "kept", 4),
        ("m6", "new", 5),
    ]
    assert r.call("c2").states[2].reason == "previous_answer"
    assert not r.had_compaction
    assert r.compactions == ()


def test_it_finds_the_oldest_messages_trimmed() -> None:
    calls = [
        *growing_run(),
        # keep the system prompt and the last five messages: U1 (m2) and A1 (m3) go
        call("c4", [S, U2, A2, U3, A3, U4], [A4], input_tokens=790, context_window=1000),
        call("c5", [S, U3, A3, U4, A4, U5], input_tokens=800, context_window=1000),
    ]
    r = reconstruct(calls)
    # A3=m7 (answer of c3), U4=m8, A4=m9, U5=m10
    assert view(r.call("c4")) == [
        ("m1", "kept", 0),
        ("m2", "dropped", None),
        ("m3", "dropped", None),
        ("m4", "kept", 1),
        ("m5", "kept", 2),
        ("m6", "kept", 3),
        ("m7", "kept", 4),
        ("m8", "new", 5),
    ]
    c5 = r.call("c5")
    assert view(c5) == [
        ("m1", "kept", 0),
        ("m2", "dropped", None),
        ("m3", "dropped", None),
        ("m4", "dropped", None),
        ("m5", "dropped", None),
        ("m6", "kept", 1),
        ("m7", "kept", 2),
        ("m8", "kept", 3),
        ("m9", "kept", 4),
        ("m10", "new", 5),
    ]
    assert [s.reason for s in c5.states[1:5]] == ["still_dropped", "still_dropped", "dropped", "dropped"]
    [k4, k5] = r.compactions
    assert (k4.call_id, k4.previous_call_id, k4.dropped, k4.shortened, k4.summarized) == (
        "c4",
        "c3",
        ("m2", "m3"),
        (),
        (),
    )
    assert k4.tokens_before == r.call("c3").estimated_input_tokens and k4.estimated  # c3 reported nothing
    assert k4.tokens_after == r.call("c4").estimated_input_tokens
    assert (k5.tokens_before, k5.tokens_after, k5.estimated) == (790, 800, False)
    assert k5.demand_tokens == 800 + r.message("m4").tokens + r.message("m5").tokens
    assert k5.trigger == "context_window" and k5.demand_ratio == round(k5.demand_tokens / 1000, 4)
    assert r.had_compaction


SUMMARY = (
    "The user plans a Lisbon trip in May for two people: TAP flights from Paris, a stay in Alfama, "
    "Belem and the Oceanarium, and a day trip to Sintra by train from Rossio (Pena Palace, Regaleira)."
)


def test_it_links_a_summary_to_the_summarizer_call() -> None:
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        # A history processor's summarizer runs inside the next chat span and ends before it.
        call(
            "s1",
            [system("Summarize this conversation."), user("user: Plan a trip... assistant: Sintra added...")],
            [assistant(SUMMARY)],
            agent="summarizer",
        ),
        call("c3", [S, user("Summary of the conversation so far: " + SUMMARY), U3], [A3]),
        call("c4", [S, user("Summary of the conversation so far: " + SUMMARY), U3, A3, U4]),
    ]
    r = reconstruct(calls)
    s1 = r.call("s1")
    assert (s1.kind, s1.summary_for_call_id, s1.states) == ("summarizer", "c3", ())
    # S=m1 U1=m2 A1=m3 U2=m4 A2=m5; the summarizer adds nothing to the history; summary=m6, U3=m7
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "summarized", None),
        ("m3", "summarized", None),
        ("m4", "summarized", None),
        ("m5", "summarized", None),
        ("m6", "summary", 1),
        ("m7", "new", 2),
    ]
    c3 = {s.message_id: s for s in r.call("c3").states}
    assert {c3[m].summary_id for m in ("m2", "m3", "m4", "m5")} == {"m6"}
    assert c3["m6"].summarizes == ("m2", "m3", "m4", "m5")
    assert c3["m6"].summarizer_call_id == "s1"
    [k] = r.compactions
    assert (k.call_id, k.summarized, k.summary_id, k.summarizer_call_id, k.dropped) == (
        "c3",
        ("m2", "m3", "m4", "m5"),
        "m6",
        "s1",
        (),
    )
    assert k.summary_tokens == r.message("m6").tokens
    # Later, the summary is kept and the range stays summarized.
    assert view(r.call("c4"))[1:7] == [
        ("m2", "summarized", None),
        ("m3", "summarized", None),
        ("m4", "summarized", None),
        ("m5", "summarized", None),
        ("m6", "kept", 1),
        ("m7", "kept", 2),
    ]
    assert r.call("c4").states[1].reason == "still_summarized"


def test_it_finds_a_summary_without_a_summarizer_call_by_its_words() -> None:
    summary = system("Earlier conversation, summarized: " + SUMMARY)
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, summary, U3]),
    ]
    r = reconstruct(calls)
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "summarized", None),
        ("m3", "summarized", None),
        ("m4", "summarized", None),
        ("m5", "summarized", None),
        ("m6", "summary", 1),
        ("m7", "new", 2),
    ]
    assert r.compactions[0].summarizer_call_id is None


def test_it_does_not_take_a_new_question_for_a_summary() -> None:
    # Everything but the system prompt trimmed; the new question shares words with the history.
    question = user("For the Lisbon trip in May with Sintra and Alfama, which Belem museums open on Monday?")
    r = reconstruct([call("c1", [S, U1], [A1]), call("c2", [S, U1, A1, U2], [A2]), call("c3", [S, question])])
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "dropped", None),
        ("m3", "dropped", None),
        ("m4", "dropped", None),
        ("m5", "dropped", None),
        ("m6", "new", 1),
    ]


LOG = "\n".join(
    f"2026-05-0{i % 9 + 1} 12:00:{i:02d} pod api-{i % 7} restarted after OOM on node pool B"
    for i in range(40)
)


def test_it_finds_a_truncated_tool_output() -> None:
    tc = tool_call("fetch_logs", {"service": "api"}, "call_1")
    cut = LOG[:300] + "... [truncated 1700 characters]"
    calls = [
        call("c1", [S, user("Why did the api restart?")], [tc]),
        call(
            "c2",
            [S, user("Why did the api restart?"), tc, tool_result(LOG)],
            [assistant("Out of memory on pool B.")],
        ),
        call(
            "c3",
            [
                S,
                user("Why did the api restart?"),
                tc,
                tool_result(cut),
                assistant("Out of memory on pool B."),
                U2,
            ],
        ),
    ]
    r = reconstruct(calls)
    # S=m1, question=m2, tool call=m3 (answer of c1), tool result=m4, answer=m5, U2=m6
    assert view(r.call("c2")) == [("m1", "kept", 0), ("m2", "kept", 1), ("m3", "kept", 2), ("m4", "new", 3)]
    c3 = r.call("c3")
    assert view(c3) == [
        ("m1", "kept", 0),
        ("m2", "kept", 1),
        ("m3", "kept", 2),
        ("m4", "shortened", 3),
        ("m5", "kept", 4),
        ("m6", "new", 5),
    ]
    state = c3.states[3]
    assert state.role == "tool" and state.reason == "cut" and state.level == "L2"
    assert state.tokens_after < state.tokens_before
    assert state.ratio == round(state.tokens_after / state.tokens_before, 4) and state.ratio < 0.5
    [k] = r.compactions
    assert (k.call_id, k.shortened, k.dropped) == ("c3", ("m4",), ())
    assert k.removed_tokens == state.tokens_before - state.tokens_after


def test_a_cut_seen_again_stays_shortened_and_is_no_new_compaction() -> None:
    tc = tool_call("fetch_logs", {"service": "api"}, "call_1")
    head = LOG[:400] + "…"
    q = user("Why did the api restart?")
    ans = assistant("Out of memory on pool B.")
    calls = [
        call("c1", [S, q], [tc]),
        call("c2", [S, q, tc, tool_result(LOG)], [ans]),
        call("c3", [S, q, tc, tool_result(head), ans, U2], [A2]),
        call("c4", [S, q, tc, tool_result(head), ans, U2, A2, U3]),
    ]
    r = reconstruct(calls)
    assert r.call("c4").states[3].status == "shortened"
    assert r.call("c4").states[3].reason == "same_cut"
    assert [k.call_id for k in r.compactions] == ["c3"]


def test_it_finds_a_message_restored_after_a_drop() -> None:
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, A1, U2, A2, U3], [A3]),  # U1 (m2) dropped
        call("c4", [S, U1, A1, U2, A2, U3, A3, U4]),  # and back
    ]
    r = reconstruct(calls)
    assert view(r.call("c3"))[1] == ("m2", "dropped", None)
    assert view(r.call("c4")) == [
        ("m1", "kept", 0),
        ("m2", "restored", 1),
        ("m3", "kept", 2),
        ("m4", "kept", 3),
        ("m5", "kept", 4),
        ("m6", "kept", 5),
        ("m7", "kept", 6),
        ("m8", "new", 7),
    ]
    assert [k.call_id for k in r.compactions] == ["c3"]  # a restore loses nothing


def test_it_sees_the_system_prompt_change() -> None:
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [system("You are a travel assistant. Answer in French."), U1, A1, U2]),
    ]
    r = reconstruct(calls)
    c2 = r.call("c2")
    assert view(c2) == [
        ("m1", "dropped", None),
        ("m2", "kept", 1),
        ("m3", "kept", 2),
        ("m4", "new", 0),
        ("m5", "new", 3),
    ]
    assert (c2.states[0].reason, c2.states[3].reason) == ("system_prompt_changed", "system_prompt_changed")
    [k] = r.compactions
    assert (k.system_prompt_changed, k.dropped, k.trigger) == (True, ("m1",), "system_prompt")


def test_it_reads_system_instructions_as_the_system_prompt() -> None:
    be_brief = [{"type": "text", "content": "Be brief."}]
    calls = [
        call("c1", [U1], [A1], system_instructions=be_brief),
        call("c2", [U1, A1, U2], [A2], system_instructions=be_brief),
        call("c3", [U1, A1, U2, A2, U3], system_instructions=[{"type": "text", "content": "Be detailed."}]),
    ]
    r = reconstruct(calls)
    # instructions=m1 (position 0), U1=m2, A1=m3, U2=m4, A2=m5, new instructions=m6, U3=m7
    assert view(r.call("c2")) == [("m1", "kept", 0), ("m2", "kept", 1), ("m3", "kept", 2), ("m4", "new", 3)]
    assert view(r.call("c3"))[0] == ("m1", "dropped", None)
    assert view(r.call("c3"))[5] == ("m6", "new", 0)
    assert r.message("m1").origin == "instructions"
    assert r.compactions[0].system_prompt_changed


def test_it_matches_tool_calls_whatever_their_ids_and_conventions() -> None:
    q = user("Weather in Lisbon?")
    calls = [
        call("c1", [S, q], [tool_call("get_weather", {"city": "Lisbon", "day": "Friday"}, "call_abc")]),
        call(
            "c2",
            [
                S,
                q,
                # the arguments as a JSON text with other spacing and key order, the id renamed
                tool_call("get_weather", '{"day":"Friday",  "city":"Lisbon"}', "toolu_01"),
                tool_result({"temp_c": 24, "sky": "clear"}, "toolu_01"),
            ],
            [assistant("24 °C and clear.")],
        ),
        call(
            "c3",
            [
                S,
                q,
                tool_call("get_weather", {"city": "Lisbon", "day": "Friday"}, "x9"),
                # the same result as a Pydantic AI user message, as a JSON text
                user_tool_result('{"sky": "clear", "temp_c": 24}', "x9", name="get_weather"),
                assistant("24 °C and clear."),
                U2,
            ],
        ),
    ]
    r = reconstruct(calls)
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "kept", 1),
        ("m3", "kept", 2),
        ("m4", "kept", 3),
        ("m5", "kept", 4),
        ("m6", "new", 5),
    ]
    assert r.message("m4").role == "tool" and r.message("m3").kind == "tool_call"
    assert r.compactions == ()


def test_it_matches_across_whitespace_and_split_parts() -> None:
    answer = assistant("The plan:\n\n1.  Fly to   Lisbon.\n2. Stay in Alfama.  ")
    split = assistant("The plan:", "1. Fly to Lisbon.", "2. Stay\tin Alfama.")
    r = reconstruct([call("c1", [S, U1], [answer]), call("c2", [S, U1, split, U2])])
    assert view(r.call("c2")) == [("m1", "kept", 0), ("m2", "kept", 1), ("m3", "kept", 2), ("m4", "new", 3)]


def test_it_reads_a_stub_in_place_of_a_message_as_shortened_to_l3() -> None:
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, U1, assistant("[assistant · turn 1] (earlier message, 31 tokens)"), U2, A2, U3]),
    ]
    r = reconstruct(calls)
    st = r.call("c3").states[2]
    assert (st.message_id, st.status, st.position, st.level, st.reason) == (
        "m3",
        "shortened",
        2,
        "L3",
        "stub",
    )
    assert r.compactions[0].shortened == ("m3",)


def test_it_drops_the_oldest_of_repeated_messages() -> None:
    go = user("continue")
    r1, r2, r3 = assistant("part one"), assistant("part two"), assistant("part three")
    calls = [
        call("c1", [S, go], [r1]),
        call("c2", [S, go, r1, go], [r2]),
        call("c3", [S, go, r2, go], [r3]),  # the first "continue" and part one trimmed
    ]
    r = reconstruct(calls)
    # S=m1, go=m2, r1=m3, second go=m4, r2=m5, third go=m6
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "dropped", None),
        ("m3", "dropped", None),
        ("m4", "kept", 1),
        ("m5", "kept", 2),
        ("m6", "new", 3),
    ]


def test_each_agent_has_its_own_history() -> None:
    p_sys, c_sys = system("You plan."), system("You code.")
    calls = [
        call("p1", [p_sys, user("Plan the feature.")], [assistant("Step 1, step 2.")], agent="planner"),
        call("k1", [c_sys, user("Write step 1.")], [assistant("def step1(): ...")], agent="coder"),
        call(
            "p2",
            [p_sys, user("Plan the feature."), assistant("Step 1, step 2."), user("More detail.")],
            agent="planner",
        ),
        call(
            "k2",
            [c_sys, user("Write step 1."), assistant("def step1(): ..."), user("Add tests.")],
            agent="coder",
        ),
    ]
    r = reconstruct(calls)
    assert [s.status for s in r.call("p2").states] == ["kept", "kept", "kept", "new"]
    assert [s.status for s in r.call("k2").states] == ["kept", "kept", "kept", "new"]
    assert r.call("k2").previous_call_id == "k1" and r.call("p2").previous_call_id == "p1"
    assert r.compactions == ()


def test_it_reads_recorded_decision_shapes() -> None:
    calls = [*growing_run(), call("c4", [S, U2, A2, U3, A3, U4])]
    d = reconstruct(calls).call("c4").to_context_decision()
    assert d["origin"] == "reconstructed" and d["messages_in"] == 8 and d["messages_out"] == 6
    assert d["compressed_count"] == 2 and d["history_compressed"]
    first, dropped, new = d["decisions"][0], d["decisions"][1], d["decisions"][-1]
    assert first["outcome"] == "kept" and first["fidelity"] == "L0" and first["index"] == 0
    assert (
        dropped["outcome"] == "dropped" and dropped["fidelity"] is None and dropped["token_count_after"] == 0
    )
    assert dropped["reason"] == "reconstructed_dropped" and dropped["origin"] == "reconstructed"
    assert new["outcome"] == "kept" and new["status"] == "new" and new["reason"] == "reconstructed_new_input"


def test_it_round_trips_to_json() -> None:
    import json

    r = reconstruct(growing_run())
    d = json.loads(json.dumps(r.to_dict()))
    assert d["origin"] == "reconstructed"
    assert [c["call_id"] for c in d["calls"]] == ["c1", "c2", "c3"]
    assert d["messages"][0]["text"] == "You are a travel assistant."
    assert len(d["messages"][0]["digest"]) == 32


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"input_messages": []}], "needs a string id"),
        ([{"id": "a", "input_messages": [{"parts": []}]}], "needs a role"),
        ([{"id": "a", "input_messages": [{"role": "user", "parts": "x"}]}], "must be a list"),
        ([{"id": "a", "input_messages": [], "input_tokens": -1}], "must be >= 0"),
        ([{"id": "a", "input_messages": []}, {"id": "a", "input_messages": []}], "appears twice"),
    ],
)
def test_it_rejects_bad_calls(calls: list[dict], message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        reconstruct(calls)


def test_it_reads_token_counts_written_as_strings() -> None:
    r = reconstruct([call("c1", [U1], input_tokens="120", context_window="128000")])
    assert (r.call("c1").input_tokens, r.call("c1").context_window) == (120, 128000)


@pytest.mark.parametrize("module", [runtime.reconstruct, _forms, _lost, _model, _records])
def test_the_docstring_examples_hold(module: object) -> None:
    failed, attempted = doctest.testmod(module)  # type: ignore[arg-type]
    assert attempted and not failed


def test_a_pinned_note_where_messages_went_is_no_summary() -> None:
    pin = system("[pinned p_1a2b3c4d · d5]\nDeploy 5: OOM on pool B.")
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        # U1 and A1 dropped; a pin quoting the plan inserted after the system prompt
        call(
            "c3", [S, system("[pinned p_1a2b3c4d · plan]\nFly TAP from Paris, stay in Alfama."), U2, A2, U3]
        ),
        call("c4", [S, pin, U2, A2, U3]),
    ]
    r = reconstruct(calls)
    assert [(s.message_id, s.status) for s in r.call("c3").states] == [
        ("m1", "kept"),
        ("m2", "dropped"),
        ("m3", "dropped"),
        ("m4", "kept"),
        ("m5", "kept"),
        ("m6", "new"),
        ("m7", "new"),
    ]


def test_a_new_summary_stands_for_what_was_already_gone() -> None:
    summary = system(
        "[Earlier conversation — summary] Plan: fly TAP from Paris, stay in Alfama, visit Belem; a day "
        "trip to Sintra by train from Rossio to Pena Palace."
    )
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, A1, U2, A2, U3], [A3]),  # U1 (m2) dropped
        call("c4", [S, summary, U3, A3, U4]),  # a summary where A1..A2 were
    ]
    r = reconstruct(calls)
    c4 = {s.message_id: (s.status, s.reason, s.summary_id) for s in r.call("c4").states}
    assert c4["m2"] == ("summarized", "absorbed_by_summary", "m8")
    assert c4["m3"] == ("summarized", "summarized", "m8")
    assert c4["m5"] == ("summarized", "summarized", "m8")
    assert r.call("c4").compaction.summarized == ("m3", "m4", "m5")  # type: ignore[union-attr]


def test_the_same_tool_result_again_is_new_and_its_cuts_go_to_the_right_copy() -> None:
    q1, q2, q3 = user("First question?"), user("Second question?"), user("Third question?")
    look = tool_call("recall", {"turn": 1}, "call_1")
    look2 = tool_call("recall", {"turn": 1}, "call_2")
    same = LOG
    cut = LOG[:200] + "..."
    ans1, ans2 = assistant("First answer."), assistant("Second answer.")
    calls = [
        call("c1", [S, q1], [look]),
        call("c2", [S, q1, look, tool_result(same, "call_1")], [ans1]),
        call("c3", [S, q1, look, tool_result(cut, "call_1"), ans1, q2], [look2]),
        call(
            "c4",
            [S, q1, look, tool_result(cut, "call_1"), ans1, q2, look2, tool_result(same, "call_2")],
            [ans2],
        ),
        call(
            "c5",
            [S, q1, look, tool_result(cut, "call_1"), ans1, q2, look2, tool_result(cut, "call_2"), ans2, q3],
        ),
    ]
    r = reconstruct(calls)
    # S=m1 q1=m2 look=m3 result=m4 ans1=m5 q2=m6 look2=m7 second result=m8 ans2=m9 q3=m10
    assert [(s.message_id, s.status) for s in r.call("c4").states][6:] == [("m7", "kept"), ("m8", "new")]
    c5 = {s.message_id: (s.status, s.position) for s in r.call("c5").states}
    assert c5["m4"] == ("shortened", 3) and c5["m8"] == ("shortened", 7)


def test_a_summarizer_call_of_the_same_agent_is_kept_out_of_its_history() -> None:
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("s1", [system("Summarize this conversation."), user("...")], [assistant(SUMMARY)]),
        call("c3", [S, user("Summary of the conversation so far: " + SUMMARY), U3]),
    ]
    r = reconstruct(calls)
    assert r.call("s1").kind == "summarizer" and r.call("c3").previous_call_id == "c2"
    assert r.compactions[0].summarizer_call_id == "s1"
    assert [s.status for s in r.call("c3").states] == ["kept"] + ["summarized"] * 4 + ["summary", "new"]


def test_a_summary_that_says_so_in_its_opening_needs_less_overlap() -> None:
    # A model's own words under a header: about a third of them come from what it replaced.
    body = (
        "The travellers want Lisbon in May for two: TAP flights, lodging in Alfama, Sintra by train; "
        "they weigh calm evenings, budgets, weather forecasts and insurance options."
    )
    headed = system("[Earlier conversation — summary of 4 messages] " + body)
    grown = [call("c1", [S, U1], [A1]), call("c2", [S, U1, A1, U2], [A2])]
    r = reconstruct([*grown, call("c3", [S, headed, U3])])
    assert view(r.call("c3")) == [
        ("m1", "kept", 0),
        ("m2", "summarized", None),
        ("m3", "summarized", None),
        ("m4", "summarized", None),
        ("m5", "summarized", None),
        ("m6", "summary", 1),
        ("m7", "new", 2),
    ]
    # The same words without the header: not enough of them came from the conversation.
    r = reconstruct([*grown, call("c3", [S, system(body), U3])])
    assert [s.status for s in r.call("c3").states] == [
        "kept",
        "dropped",
        "dropped",
        "dropped",
        "dropped",
        "new",
        "new",
    ]


def test_a_new_pin_before_a_new_summary_does_not_take_the_old_summary_as_its_stub() -> None:
    old = system("[Earlier conversation — summary] Plan: fly TAP from Paris, stay in Alfama, visit Belem.")
    new = system(
        "[Earlier conversation — summary] Plan: fly TAP from Paris, stay in Alfama, visit Belem; Sintra "
        "by train from Rossio."
    )
    pin = system("[pinned p_1a2b3c4d · d] Alfama.")
    calls = [
        call("c1", [S, U1], [A1]),
        call("c2", [S, U1, A1, U2], [A2]),
        call("c3", [S, old, U2, A2, U3], [A3]),  # U1, A1 summarized into `old`
        call("c4", [S, pin, new, U3, A3, U4]),  # U2, A2 and `old` summarized into `new`; a new pin
    ]
    r = reconstruct(calls)
    c4 = {s.message_id: (s.status, s.summary_id) for s in r.call("c4").states}
    ids = {m.text: m.message_id for m in r.messages}
    new_id, old_id, pin_id = (
        ids[new["parts"][0]["content"]],
        ids[old["parts"][0]["content"]],
        ids[pin["parts"][0]["content"]],
    )
    assert c4[new_id] == ("summary", None)
    assert c4[old_id] == ("summarized", new_id)
    assert c4[pin_id] == ("new", None)
    assert all(c4[ids[m["parts"][0]["content"]]] == ("summarized", new_id) for m in (U1, A1, U2, A2))
