#!/usr/bin/env bash
# The one test command (README; .ci/run calls it): installs what it needs, then runs the
# linters (ruff, mypy, import-linter) and every test tier: unit (tests/) and integration
# (integration/: real processes, files, sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check .
echo "== mypy"; mypy
echo "== import-linter"; lint-imports
echo "== pytest"; pytest "$@"
