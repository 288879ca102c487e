"""The `arcana` argument parser and entry point (`main`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .browse import FILTERS, cmd_flow, cmd_list, cmd_show
from .command import Command, DataError, UsageError
from .diff import cmd_diff
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
    top = parser.add_subparsers(dest="group", required=True, metavar="{trace}")
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
    return parser


COMMANDS = {
    "list": cmd_list,
    "show": cmd_show,
    "replay": cmd_replay,
    "explain": cmd_explain,
    "flow": cmd_flow,
    "diff": cmd_diff,
    "upload": cmd_upload,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run `arcana …` with `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, or an argparse usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    command = Command(args)
    prog = f"arcana trace {args.command}"
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
