# Shared by scripts/run and scripts/test: create .venv and install the pinned requirements once.
# Re-installs only when requirements.txt or pyproject.toml change (a stamp file records their hash).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "error: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  PY="$(find_python)"
  echo "Creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=".venv/.arcana-installed"
want="$(cat requirements.txt pyproject.toml | .venv/bin/python -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Installing pinned requirements into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  # The `arcana` console script (arcana trace …); dependencies are already pinned above.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
