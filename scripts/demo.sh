#!/usr/bin/env bash
# The main job: installs the runtime into ./.venv, initialises ./demo-data (local profile,
# embedded SQLite), registers the example maintenance scripts with cron schedules, runs each
# once for real and shows status, exit code and the head of its log.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python examples/demo.py "$@"
