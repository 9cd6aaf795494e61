#!/usr/bin/env bash
# The main job: installs the runtime and the web panel into ./.venv, initialises ./demo-data
# (local profile, embedded SQLite), registers the example maintenance scripts with cron
# schedules, runs each once for real, shows status, exit code and the head of its log, and
# ends with the commands that keep the schedules running and open the panel (it starts no
# process that outlives it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh web
exec .venv/bin/python examples/demo.py "$@"
