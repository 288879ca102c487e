"""Lost instructions: the sentences that stated a constraint or a fact and that the context stopped
holding, with where they came from, the compaction that lost them and the first call without them."""

from __future__ import annotations

import pytest

from runtime.reconstruct import instruction_kinds, reconstruct, sentences

from .helpers import assistant, call, system, user

S = system("You are a coding agent. Be concise.")
TASK = user("Refactor the billing code. Do not change the public API of the Invoice class. Thanks!")
A1 = assistant("I will start with billing/models.py.")
U2 = user("Go on with the tests.")
A2 = assistant("Tests updated in tests/test_billing.py.")
U3 = user("Now the views.")
A3 = assistant("Views done.")
U4 = user("Anything left?")


def test_it_lists_the_instructions_a_trim_lost() -> None:
    calls = [
        call("c1", [S, TASK], [A1]),
        call("c2", [S, TASK, A1, U2], [A2]),
        call("c3", [S, A1, U2, A2, U3], [A3]),  # the task (m2) trimmed
        call("c4", [S, U2, A2, U3, A3, U4]),
    ]
    r = reconstruct(calls)
    lost = {li.text: li for li in r.lost_instructions}
    assert set(lost) == {"Refactor the billing code.", "Do not change the public API of the Invoice class."}
    li = lost["Do not change the public API of the Invoice class."]
    assert (li.source, li.message_id, li.agent) == ("user", "m2", None)
    assert (li.first_seen_call_id, li.last_seen_call_id, li.first_missing_call_id, li.compaction_call_id) == (
        "c1",
        "c2",
        "c3",
        "c3",
    )
    assert li.why == ("constraint", "imperative", "name")
    assert lost["Refactor the billing code."].why == ("imperative",)
    assert r.lost_an_instruction
    # The system prompt stayed: nothing of it is lost.
    assert all(li.source == "user" for li in r.lost_instructions)


def test_a_summary_that_keeps_the_instruction_keeps_it() -> None:
    summary = system(
        "Summary so far: the user asked to refactor the billing code without changing the public API of "
        "the Invoice class; models and tests are done."
    )
    calls = [
        call("c1", [S, TASK], [A1]),
        call("c2", [S, TASK, A1, U2], [A2]),
        call("c3", [S, summary, U3], [A3]),
        call("c4", [S, summary, U3, A3, U4]),
    ]
    r = reconstruct(calls)
    assert r.compactions[0].summary_id is not None
    # "Do not change the public API of the Invoice class." is held close (its words are all there);
    # "Refactor the billing code." verbatim in words too.
    assert [li.text for li in r.lost_instructions] == []


def test_an_instruction_back_at_the_end_is_not_lost() -> None:
    calls = [
        call("c1", [S, TASK], [A1]),
        call("c2", [S, A1, U2], [A2]),
        call("c3", [S, TASK, A1, U2, A2, U3]),
    ]
    assert reconstruct(calls).lost_instructions == ()


def test_it_lists_what_a_changed_system_prompt_lost() -> None:
    calls = [
        call("c1", [system("You are a travel agent. Always answer in French."), user("Hi there")], [A1]),
        call("c2", [system("You are a travel agent."), user("Hi there"), A1, U2]),
    ]
    r = reconstruct(calls)
    [li] = r.lost_instructions
    assert (li.text, li.source, li.why) == (
        "Always answer in French.",
        "system_prompt",
        ("constraint", "name"),
    )
    assert li.compaction_call_id == "c2" and r.call("c2").compaction is not None
    assert r.call("c2").compaction.trigger == "system_prompt"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sentence", "kinds"),
    [
        ("Never touch the auth module.", ("constraint",)),
        ("You must reply in JSON.", ("constraint", "name")),
        ("Use British spelling.", ("imperative", "name")),
        ("The budget is 40000 euros.", ("number",)),
        ("Our client is Acme Corp.", ("name",)),
        ("Is it raining?", ()),
        ("Thanks!", ()),
        ("ok sounds good", ()),
    ],
)
def test_the_heuristic(sentence: str, kinds: tuple[str, ...]) -> None:
    assert instruction_kinds(sentence) == kinds


def test_sentences_split_at_ends_and_lines() -> None:
    assert sentences("One two three. Four five six!\n- seven eight nine") == [
        "One two three.",
        "Four five six!",
        "- seven eight nine",
    ]
