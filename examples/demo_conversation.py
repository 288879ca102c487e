"""Play Arcana Console's scripted demo conversation and write its traces.

    python examples/demo_conversation.py ./arcana-traces

Everything lives in `runtime.demo` (so the Celery worker can import it): a chat that pins its
constraints, calls a tool, gets its history compressed in a 2,400-token window, recalls turn 1 and
unpins; then a pool of two agents (researcher, writer). Offline: a scripted provider, no network.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.demo import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
