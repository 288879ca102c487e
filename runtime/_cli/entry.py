"""The `arcana` argument parser and entry point (`main`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .browse import FILTERS, cmd_flow, cmd_list, cmd_show
from .command import Command, DataError, UsageError
from .diff import cmd_diff
from .experiment import cmd_experiment_compare, cmd_experiment_run
from .replay import cmd_explain, cmd_replay
from .upload import cmd_upload

# --------------------------------------------------------------------------------------------------
# Parser and entry point


def build_parser() -> argparse.ArgumentParser:
    """The `arcana` argument parser (exposed for tests and docs)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir", help="trace directory or file (default: $ARCANA_TRACE_DIR or ./arcana-traces)"
    )
    common.add_argument("--agent", help="only this pool agent")
    common.add_argument("--json", action="store_true", help="machine-readable JSON output")

    parser = argparse.ArgumentParser(prog="arcana", description="Arcana Console command line.")
    top = parser.add_subparsers(dest="group", required=True, metavar="{trace,experiment}")
    trace = top.add_parser("trace", help="read, replay and upload trace files")
    sub = trace.add_subparsers(
        dest="command", required=True, metavar="{list,show,replay,explain,flow,diff,upload}"
    )

    sub.add_parser("list", parents=[common], help="runs, newest first")

    show = sub.add_parser("show", parents=[common], help="numbered events of a run (filters are OR-ed)")
    show.add_argument("run_id", help="run id or a unique prefix")
    for name in FILTERS:
        show.add_argument(f"--{name}", action="store_true", help=f"show {', '.join(FILTERS[name])} events")

    replay = sub.add_parser("replay", parents=[common], help="what the model saw at a turn")
    replay.add_argument("run_id")
    replay.add_argument("--turn", type=int, help="1-based turn")
    replay.add_argument("--step", type=int, help="only this step of the turn (1-based)")
    only = replay.add_mutually_exclusive_group()
    only.add_argument("--decision-only", action="store_true", help="context decision and pins only")
    only.add_argument("--prompt-only", action="store_true", help="prompt snapshot only")

    explain = sub.add_parser("explain", parents=[common], help="inputs, output, calls and verdict of a turn")
    explain.add_argument("run_id")
    explain.add_argument("--turn", type=int, help="1-based turn")

    flow = sub.add_parser("flow", parents=[common], help="turns, steps, tool and primitive calls")
    flow.add_argument("run_id")

    diff = sub.add_parser("diff", parents=[common], help="two runs side by side: summary, turns, divergence")
    diff.add_argument("run_a", metavar="RUN_A", help="run id or prefix in --dir, or a trace file of one run")
    diff.add_argument("run_b", metavar="RUN_B", help="the run to compare it with (same forms)")
    diff.add_argument(
        "--turn", type=int, help="working-set diff of this turn (default: the first divergence)"
    )

    upload = sub.add_parser("upload", parents=[common], help="send trace files to an Arcana Console server")
    upload.add_argument("paths", nargs="+", metavar="file-or-dir")
    upload.add_argument("--server", help="server URL (default: $ARCANA_SERVER)")
    upload.add_argument("--api-key", help="project API key (default: $ARCANA_API_KEY)")
    upload.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for each file (default 600)"
    )
    upload.add_argument("--timeout-http", type=float, default=30.0, help=argparse.SUPPRESS)
    _experiment_parsers(top)
    return parser


def _experiment_parsers(top: Any) -> None:
    """`arcana experiment run|compare`: experiments on a server (docs/guide/experiments.md)."""
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--server", help="server URL (default: $ARCANA_SERVER)")
    server.add_argument("--api-key", help="project API key (default: $ARCANA_API_KEY)")
    server.add_argument("--json", action="store_true", help="machine-readable JSON output")
    server.add_argument("--timeout-http", type=float, default=30.0, help=argparse.SUPPRESS)
    group = top.add_parser("experiment", help="run datasets through a model on a server, compare experiments")
    sub = group.add_subparsers(dest="command", required=True, metavar="{run,compare}")
    run = sub.add_parser("run", parents=[server], help="start an experiment, wait, print its results")
    run.add_argument("--dataset", type=int, required=True, help="the dataset's id")
    run.add_argument("--version", type=int, help="its version (default: the newest)")
    run.add_argument("--project", help="project id or slug (default: the key's)")
    run.add_argument("--model", help="provider/model, e.g. scripted/small-talk (default: the server's)")
    run.add_argument("--primitives", help='cognitive primitives, e.g. "recall,pin"; "" for none')
    run.add_argument("--window", type=int, help="context window in tokens")
    run.add_argument("--system", help="system prompt (default: each item's)")
    run.add_argument("--judge", type=int, action="append", help="a judge's id (repeat for more)")
    run.add_argument("--name", help="the experiment's name")
    run.add_argument("--max-items", type=int, default=100, help="at most this many items (default 100)")
    run.add_argument("--max-tokens", type=int, default=1_000_000, help="token cap (default 1,000,000)")
    run.add_argument("--parallel", type=int, help="tasks working side by side (default 1)")
    run.add_argument("--no-wait", action="store_true", help="start it and return")
    run.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait (default 1800)")
    compare = sub.add_parser("compare", parents=[server], help="two experiments item by item")
    compare.add_argument("a", type=int, metavar="A", help="an experiment's id")
    compare.add_argument("b", type=int, metavar="B", help="the experiment to compare it with")


COMMANDS = {
    "list": cmd_list,
    "show": cmd_show,
    "replay": cmd_replay,
    "explain": cmd_explain,
    "flow": cmd_flow,
    "diff": cmd_diff,
    "upload": cmd_upload,
    "run": cmd_experiment_run,
    "compare": cmd_experiment_compare,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run `arcana …` with `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, or an argparse usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    command = Command(args)
    prog = f"arcana {args.group} {args.command}"
    try:
        return COMMANDS[args.command](command)
    except UsageError as exc:
        command.err.line(f"{prog}: {exc}")
        return 2
    except DataError as exc:
        command.err.block(f"{prog}: error: {exc}")
        return 1
    except BrokenPipeError:  # `arcana trace show … | head`
        return 0
