#!/usr/bin/env bash
# What the failover drill (integration/drills/failover.py) needs besides the dev venv:
# etcd from Debian and a venv of Patroni built from the system Python (/usr/bin/python3),
# in a directory the postgres user can read and run from (Patroni runs as postgres; the
# pyenv Python under /root is mode 700). The venv is cached: a second run only checks it.
#   scripts/drill_env.sh            install if missing; prints the venv's path
# QL3_PATRONI_VENV overrides the venv's place (default /var/cache/ql3-drill/patroni-venv).
set -euo pipefail
venv="${QL3_PATRONI_VENV:-/var/cache/ql3-drill/patroni-venv}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
stamp="$venv/.installed-patroni-4.1"
if [ ! -f "$stamp" ]; then
  $SUDO mkdir -p "$(dirname "$venv")"
  $SUDO rm -rf "$venv"
  if ! /usr/bin/python3 -m venv "$venv" 2>/dev/null; then  # Debian splits ensurepip out
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq python3-venv >/dev/null
    /usr/bin/python3 -m venv --clear "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    'psycopg[binary]>=3.2,<4' 'patroni[etcd3,psycopg3]>=4.1,<4.2'
  chmod -R a+rX "$(dirname "$venv")"
  touch "$stamp"
fi
echo "$venv"
