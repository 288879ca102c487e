"""runtime.rerun: a step's context read back from its trace, edited, and re-run as a branch run."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from runtime import CallableSink, ContextStrategy, Runtime, RuntimeConfig, ScriptedProvider
from runtime.demo import CHAT_TURNS, SYSTEM, build_demo_runtime
from runtime.errors import ProviderHTTPError
from runtime.rerun import (
    RerunEditError,
    apply_edits,
    parse_edits,
    rerun_step,
    scripted_provider,
    step_context,
)

BUDGET = "The budget is 42,000 EUR. " + "filler " * 60


def truncated_run() -> list[dict[str, Any]]:
    """A chat whose last step saw only its last message: aggressive truncation dropped the rest."""
    out: list[dict[str, Any]] = []

    async def main() -> None:
        p = ScriptedProvider(["Noted the budget.", "Noted the venue.", "The answer."], model="scripted-1")
        config = RuntimeConfig(
            context_window=400,
            response_reserve=50,
            context_strategy=ContextStrategy(force="aggressive_truncate", aggressive_keep_turns=1),
            trace_dir=None,
            trace_include_prompt_snapshots=True,
        )
        rt = Runtime({"scripted": p}, config=config, trace_sinks=[CallableSink(out.append)])
        async with rt.chat(system="You plan launches.") as chat:
            for text in [BUDGET, "The venue is Lisbon. " + "filler " * 60, "What is the budget?"]:
                await chat.send(text)

    asyncio.run(main())
    return out


def demo_truncated_run() -> list[dict[str, Any]]:
    """The runtime's demo chat (`runtime.demo`: a pin, a tool call, a recall) played with aggressive
    truncation, so that from turn 3 on its steps no longer receive the brief and the plan."""
    out: list[dict[str, Any]] = []
    rt = build_demo_runtime(None, trace_sinks=[CallableSink(out.append)])
    rt.config = dataclasses.replace(
        rt.config, context_strategy=ContextStrategy(force="aggressive_truncate", aggressive_keep_turns=2)
    )

    async def main() -> None:
        async with rt.chat(system=SYSTEM) as chat:
            for text, _ in CHAT_TURNS:
                await chat.send(text)

    asyncio.run(main())
    return out


def test_the_demo_chat_with_aggressive_truncation_dropped_the_brief_and_kept_its_pin() -> None:
    ctx = step_context(demo_truncated_run(), turn=4, step=1)
    statuses = [i.status for i in ctx.items]
    assert statuses[:2] == ["system", "pinned"]  # the head: the system prompt, then the pinned block
    assert statuses[2:10] == ["dropped"] * 8 and statuses[10:] == ["kept"] * 3
    brief = ctx.items[2]
    assert brief.original is not None and brief.original["content"].startswith("Here is the brief")
    assert ctx.items[1].pin_id and ctx.items[1].text.startswith("[pinned ")
    messages = apply_edits(ctx, [{"op": "restore", "index": 2}, {"op": "unpin", "index": 1}])
    assert [m["content"][:17] for m in messages[:2]] == [SYSTEM[:17], "Here is the brief"]


def test_step_context_reads_dropped_messages_and_their_originals() -> None:
    ctx = step_context(truncated_run(), turn=3, step=1)
    assert ctx.origin == "recorded"
    assert [(i.role, i.status) for i in ctx.items] == [
        ("system", "system"),
        ("user", "dropped"),
        ("assistant", "dropped"),
        ("user", "dropped"),
        ("assistant", "dropped"),
        ("user", "kept"),
    ]
    assert ctx.items[1].original == {"role": "user", "content": BUDGET}
    assert ctx.messages() == [
        {"role": "system", "content": "You plan launches."},
        {"role": "user", "content": "What is the budget?"},
    ]


def test_edits_restore_remove_pin_and_system() -> None:
    ctx = step_context(truncated_run(), turn=3, step=1)
    edits = parse_edits(
        [
            {"op": "restore", "index": 1},
            {"op": "system", "content": "Be terse."},
            {"op": "pin", "content": "Dana owns go/no-go."},
        ],
        ctx,
    )
    messages = apply_edits(ctx, edits)
    assert [m["role"] for m in messages] == ["system", "system", "user", "user"]
    assert messages[0]["content"] == "Be terse."
    assert messages[1]["content"].startswith("[pinned p_") and messages[1]["content"].endswith(
        "Dana owns go/no-go."
    )
    assert messages[2]["content"] == BUDGET
    assert apply_edits(ctx, [{"op": "remove", "index": 5}]) == [
        {"role": "system", "content": "You plan launches."}
    ]


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        ({"op": "restore", "index": 99}, "edits[0].index", "unknown message index 99"),
        ({"op": "restore", "index": 5}, "edits[0].index", "cannot be restored"),
        ({"op": "unpin", "index": 0}, "edits[0].index", "not a pinned block"),
        ({"op": "explode"}, "edits[0].op", "op must be one of"),
        ({"op": "system"}, "edits[0].content", "system needs"),
        ({"op": "remove", "index": "2"}, "edits[0].index", "must be an integer"),
    ],
)
def test_bad_edits_name_their_field(edit: dict[str, Any], field: str, words: str) -> None:
    ctx = step_context(truncated_run(), turn=3, step=1)
    with pytest.raises(RerunEditError) as err:
        parse_edits([edit], ctx)
    assert err.value.field == field and words in str(err.value)


def test_missing_step_is_a_trace_format_error() -> None:
    with pytest.raises(Exception, match="no step 2 in turn 9"):
        step_context(truncated_run(), turn=9, step=2)


def test_rerun_writes_a_branch_run_that_names_its_origin() -> None:
    events = truncated_run()
    ctx = step_context(events, turn=3, step=1)
    edits = parse_edits([{"op": "restore", "index": 1}], ctx)
    messages = apply_edits(ctx, edits)
    out: list[dict[str, Any]] = []
    result = asyncio.run(
        rerun_step(
            ctx,
            messages,
            scripted_provider(messages),
            run_id="branch-1",
            sink=CallableSink(out.append),
            edits=edits,
        )
    )
    assert result.ok and result.answer is not None and "3 messages" in result.answer
    assert [e["event_type"] for e in out] == ["context_decision", "prompt_snapshot", "turn", "llm_call"]
    # The branch's decision: the restored message kept at L0, the others as the step had them.
    rows = out[0]["metadata"]["context_decision"]["decisions"]
    assert [(r["index"], r["outcome"], r["reason"]) for r in rows] == [
        (0, "kept", "as the step had it"),
        (1, "kept", "re-run: restored"),
        (2, "dropped", "as the step had it"),
        (3, "dropped", "as the step had it"),
        (4, "dropped", "as the step had it"),
        (5, "kept", "as the step had it"),
    ]
    branch = out[2]["metadata"]["branch"]
    assert branch["from_run_id"] == events[0]["run_id"]
    assert (branch["turn"], branch["step"], branch["edits"]) == (3, 1, [{"op": "restore", "index": 1}])
    assert out[1]["metadata"]["prompt_snapshot"]["messages"] == messages
    assert out[2]["metadata"]["facts"]["assistant_text"] == result.answer
    # Read back, the branch is a run like any other: its one step received the edited messages.
    again = step_context(out, turn=3, step=1)
    assert again.messages() == messages and again.answer == result.answer


def test_rerun_records_a_provider_failure() -> None:
    class Failing(ScriptedProvider):
        async def complete(self, messages: Any, **kw: Any) -> Any:
            raise ProviderHTTPError("bad gateway", status_code=502)

    ctx = step_context(truncated_run(), turn=3, step=1)
    out: list[dict[str, Any]] = []
    result = asyncio.run(
        rerun_step(ctx, ctx.messages(), Failing([]), run_id="b2", sink=CallableSink(out.append))
    )
    assert not result.ok and "bad gateway" in (result.error or "")
    assert [e["event_type"] for e in out] == ["context_decision", "prompt_snapshot", "error", "turn"]
    assert out[3]["metadata"]["assessment"]["failed"] is True


def test_otlp_run_statuses_are_reconstructed() -> None:
    """A run from spans: its snapshots are the calls' input messages; a message absent from the last
    call is dropped, with the text the earlier call received as its original."""

    def snap(turn: int, msgs: list[dict[str, Any]], answer: str) -> list[dict[str, Any]]:
        md = {"producer": "arcana-console-otlp", "console_turn": turn, "console_step": 1}
        base = {"run_id": "otlp-1", "role": "system", "timestamp": f"2026-12-05T00:00:0{turn}+00:00"}
        return [
            {
                **base,
                "step_id": f"s{turn}-in",
                "parent_step_id": f"s{turn}",
                "event_type": "prompt_snapshot",
                "metadata": {**md, "prompt_snapshot": {"model": "m", "messages": msgs}},
            },
            {
                **base,
                "step_id": f"s{turn}",
                "event_type": "turn",
                "metadata": {**md, "facts": {"assistant_text": answer}},
            },
        ]

    u1 = {"role": "user", "content": "Budget is 42k. Remember it."}
    a1 = {"role": "assistant", "content": "Noted."}
    u2 = {"role": "user", "content": "What is the budget?"}
    events = snap(1, [{"role": "system", "content": "S"}, u1], "Noted.") + snap(
        2, [{"role": "system", "content": "S"}, u2], "?"
    )
    ctx = step_context(events, turn=2, step=1)
    assert ctx.origin == "reconstructed"
    dropped = [i for i in ctx.items if i.status == "dropped"]
    assert [d.original for d in dropped] == [
        {"role": "user", "content": u1["content"]},
        {"role": "assistant", "content": a1["content"]},
    ]
    restored = apply_edits(ctx, [{"op": "restore", "index": dropped[0].index}])
    assert {"role": "user", "content": u1["content"]} in restored
