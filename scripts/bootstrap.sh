#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs the project into it, editable.
#   scripts/bootstrap.sh            runtime only (the local profile)
#   scripts/bootstrap.sh web        the local profile and the web panel (./panel, editable;
#                                   `ql3 local web`): what scripts/demo.sh installs
#   scripts/bootstrap.sh dev        plus the test and lint tools, and the web panel
#                                   (./panel, the qinglong-panel distribution) editable
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed-${extra:-runtime}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ panel/pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  if [ "$extra" = dev ]; then
    # the panel is not on an index: pip takes it from ./panel for `qinglong[web]`
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
      -e ".[dev,web]" -e ./panel
  elif [ "$extra" = web ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[web]" -e ./panel
  elif [ -n "$extra" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extra]"
  else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
  fi
  touch "$stamp"
fi
