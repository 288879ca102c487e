"""The `arcana` command line: `arcana trace list|show|replay|explain|flow|diff|upload`.

Reads traces written by Arcana Console's runtime and by arcana-agent 1.2 alike (through
`runtime._trace_reader`) and prints them through `runtime._render`, which never lets trace text act
on the terminal. Turns are 1-based everywhere; an Arcana 1.2 file's LLM iteration i is turn i + 1.

Exit status: 0 when all went well; 1 when the data was at fault (no such run, unreadable file,
malformed lines — reported with their line numbers and skipped —, an upload rejected or failed);
2 for a usage error (bad option, `replay` without `--turn`, a turn the run does not have).

    $ arcana trace list --dir ./arcana-traces
    $ arcana trace show 17a81a75 --cognitive
    $ arcana trace replay 17a81a75 --turn 5
    $ arcana trace diff 17a81a75 8b2685b6 --turn 2
    $ arcana trace upload ./arcana-traces --server http://127.0.0.1:8000 --api-key arc_...

Modules: `formatting` (wording shared by the commands), `command` (one invocation's state and
its errors), `browse` (list, show, flow), `replay` (replay, explain), `diff` (two runs, compared by
`runtime.compare`), `upload`, `entry` (the parser and `main`, the `arcana` console script).
"""

from .command import Command, DataError, UsageError
from .entry import build_parser, main
from .formatting import pin_blocks, primitive_line, unrecorded_calls

__all__ = [
    "Command",
    "DataError",
    "UsageError",
    "build_parser",
    "main",
    "pin_blocks",
    "primitive_line",
    "unrecorded_calls",
]
