"""Scores, review queues and model judges (issue 36; docs/guide/scores.md).

- `actions`: score configs and scores — what input may say (`check_*`), writing, editing and deleting
  them (`do_*`, each with its audit row in the same transaction);
- `targets`: a score's address (run, turn, step, context decision, compaction) checked against the run;
- `expressions`: the runs filter's `score.<name><op><value>` conditions (used by `traces/runs/filters.py`);
- `queues`: review queues (take the next run under a lock, done, skipped, progress);
- `judging` (prompts, strict answers) and `worker` (judge runs under a lease, the sweeper);
- `views`, `api`, `serializers`, `forms`, `export` (CSV / JSONL), `charts` (the distribution per config).
"""
