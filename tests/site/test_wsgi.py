"""The WSGI entry point: loading it imports every view and freezes what is loaded out of the cyclic
garbage collector, so a full collection during a request no longer walks Django, DRF and our code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, sys, time
import arcana_site.wsgi
frozen = gc.get_freeze_count()
t = time.process_time()
gc.collect()
print(json.dumps({"frozen": frozen, "views": "traces.core.api" in sys.modules and "traces.runs.views" in sys.modules,
                  "tracked": len(gc.get_objects()), "full_collection_s": time.process_time() - t}))
"""


def test_loading_the_app_imports_the_views_and_freezes_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="arcana_site.settings", SECRET_KEY="test", ARCANA_DATA_DIR=str(tmp_path)
    )
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["views"]
    # Django, DRF and our modules: tens of thousands of objects, frozen; a handful left to collect.
    assert probe["frozen"] > 50_000
    assert probe["tracked"] < probe["frozen"] / 20
