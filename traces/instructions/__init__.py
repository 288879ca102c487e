"""Lost instructions checked by a model (issue 35): where a provider is configured, ask a model
whether an answer given after the context stopped holding an instruction contradicts it.

- `lost`: a run's lost instructions (from its decisions' reports), each with a stable key and the
  answer a check reads;
- `checking`: the prompt, the offline `scripted` checker, the strict reading of the answer and the
  model call;
- `actions`: `check_request` / `do_check_lost_instructions` (members start checks; rows are queued
  and the `traces.tasks.check_lost_instructions` task enqueued on commit) and
  `do_check_lost_instruction` (the worker's side: one check, its verdict or its error);
- `api`, `serializers`, `views`: `GET/POST /api/v1/projects/<p>/runs/<r>/instruction-checks` and the
  run page's button.
"""
