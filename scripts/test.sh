#!/usr/bin/env bash
# The one test command (README; .ci/run calls it): installs what it needs, then runs the
# linters (ruff, mypy, import-linter) and every test tier: unit (tests/) and integration
# (integration/: real processes, files, sockets).
# With arguments, the pytest part is one run of `pytest "$@"` instead of the tiers.
# At the end (also after a failure) it prints each tier's wall time, one line a tier, and
# for a tier it did not run, why.
set -euo pipefail
cd "$(dirname "$0")/.."
TIMES=()
timed() {  # timed NAME COMMAND...: run it, record its wall time under NAME, pass its status on
  local name="$1" start=$SECONDS status=0
  shift
  "$@" || status=$?
  TIMES+=("$(printf '%-22s %5ds%s' "$name" $((SECONDS - start)) \
    "$([ "$status" -eq 0 ] || echo "  failed (exit $status)")")")
  return "$status"
}
skipped() { TIMES+=("$(printf '%-22s %6s  %s' "$1" skipped "$2")"); }
summary() {
  local status=$?
  echo "== tier times (wall clock)"
  printf '%s\n' "${TIMES[@]}"
  [ "$status" -eq 0 ] || echo "(stopped by a failure, exit $status: later tiers did not run)"
}
trap summary EXIT
timed "setup: venv" bash scripts/bootstrap.sh dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; timed "lint: ruff" ruff check .
echo "== mypy"; timed "lint: mypy" mypy
echo "== import-linter"; timed "lint: import-linter" lint-imports
setup_start=$SECONDS
echo "== faketime"  # integration/test_clock_step.py needs libfaketime (its MT build)
if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq faketime
fi
echo "== bubblewrap"  # integration/helm runs the chart's containers as their pods would
if ! command -v bwrap >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq bubblewrap
fi
echo "== buildah, debootstrap"  # the image tier builds the Dockerfile's images (scripts/build_images.sh)
image=1
if [ "$(id -u)" -ne 0 ]; then
  image=0
  echo "not root: buildah's chroot builds need root; the image tier will be skipped"
elif ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq buildah debootstrap
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
drill=1
if [ "$(id -u)" -eq 0 ]; then
  QL3_PATRONI_VENV="$(bash scripts/drill_env.sh)"
  export QL3_PATRONI_VENV QL3_DRILL_REQUIRED=1  # CI never passes by skipping the drill
else
  drill=0
  echo "not root: the failover drill will be skipped"
fi
TIMES+=("$(printf '%-22s %5ds' "setup: system tools" $((SECONDS - setup_start)))")
if [ "$#" -gt 0 ]; then
  echo "== pytest $*"; timed "pytest $*" pytest "$@"
  skipped "tiers" "arguments given: one pytest run of them instead"
  exit 0
fi
# pytest-xdist: the unit tier runs on two worker processes, the integration tier on three
# (QL3_TEST_WORKERS=N for N in both, 1 for one process). The integration tier's tests mostly
# wait on processes they started, so one process left half of this 2-core machine idle: on
# a clean clone it took 2,394 s in one process and 1,243 s on two (--dist loadfile: a test
# file whole on one worker, so a module's fixture is made once; no file takes over 100 s, so
# the tail is short), two workers still leaving a quarter of the CPU idle; the unit tier is
# CPU-bound (111 s in one process, 58 s on two). Tests marked `serial` (they need the
# machine to themselves) always run alone in a pass of their own, after the integration tier.
unit_workers="${QL3_TEST_WORKERS:-2}" int_workers="${QL3_TEST_WORKERS:-3}"
unit_par=() int_par=()
[ "$unit_workers" = 1 ] || unit_par=(-n "$unit_workers")
[ "$int_workers" = 1 ] || int_par=(-n "$int_workers" --dist loadfile)
# --durations: every run prints its slowest tests, so a tier that grows slow says where
dur=(--durations=40 --durations-min=1)
allow_empty() {  # pytest exits 5 when the marker selects no test: not a failure here
  local status=0
  "$@" || status=$?
  [ "$status" -eq 5 ] && return 0
  return "$status"
}
base_log="test-artifacts/image-base.log" base_pid=""
if [ "$image" -eq 1 ]; then
  # the image tier's Debian base (debootstrap on a fresh machine: two to three minutes,
  # mostly fetching and unpacking) is made beside the unit and integration tiers; the image
  # tier waits for it, and builds it itself should this fail (its log says why)
  mkdir -p test-artifacts && bash scripts/build_images.sh --base-only > "$base_log" 2>&1 &
  base_pid=$!
fi
echo "== unit (tests/)"; timed "unit: tests/" pytest "${unit_par[@]}" "${dur[@]}" tests
echo "== integration (integration/, not the drill, not the serial tests)"
timed "integration" pytest "${int_par[@]}" "${dur[@]}" integration \
  -m "not drill and not image and not serial"
echo "== integration, serial (marker serial: the machine to themselves)"
timed "integration: serial" allow_empty pytest "${dur[@]}" integration \
  -m "serial and not drill and not image"
if [ "$image" -eq 1 ]; then
  # the first run makes the Debian base (debootstrap, a few minutes, cached under
  # /var/cache/ql3-image); later runs rebuild only when the build context changed
  echo "== image (integration/helm/test_images.py, marker image)"
  if [ -n "$base_pid" ] && ! wait "$base_pid"; then
    echo "the Debian base made beside the tests failed; the image tier makes it itself:"
    tail -n 20 "$base_log"
  fi
  timed "image" pytest integration -m image -rs
else
  skipped "image" "not root: buildah's chroot builds and the sandbox need root"
fi
if [ "$drill" -eq 1 ]; then
  echo "== drill (integration/drills, marker drill)"
  timed "drill" pytest integration -m drill
else
  skipped "drill" "not root: Patroni's PostgreSQL members need root (runuser)"
fi
