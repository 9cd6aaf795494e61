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
echo "== faketime"  # integration/test_clock_step.py (case C15) needs libfaketime
if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq faketime
fi
echo "== bubblewrap"  # integration/helm runs the chart's containers as their pods would
if ! command -v bwrap >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq bubblewrap
fi
echo "== chromium"  # integration/panel: the panel in a real browser (playwright, no download)
if ! command -v chromium-headless-shell >/dev/null 2>&1 || ! fc-list | grep -qi wenquanyi; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium-headless-shell fonts-wqy-microhei
fi
echo "== postgres"  # integration/control needs PostgreSQL at 127.0.0.1:5432
if ! pg_isready -q -h 127.0.0.1; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 && break; sleep 0.2; done
fi
echo "== drill tools"  # integration/drills (marker drill): etcd and a Patroni venv, cached
if [ "$(id -u)" -eq 0 ]; then
  QL3_PATRONI_VENV="$(bash scripts/drill_env.sh)"
  export QL3_PATRONI_VENV QL3_DRILL_REQUIRED=1  # CI never passes by skipping the drill
else
  echo "not root: the failover drill will be skipped"
fi
echo "== pytest"; pytest "$@"
