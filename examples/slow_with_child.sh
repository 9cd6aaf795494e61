#!/bin/sh
# slow_with_child.sh [SECONDS] - a task meant to outlive its timeout.
# Starts a background child (sleep SECONDS, default 300), prints the child's pid, then waits
# for it. Run it with a timeout shorter than SECONDS: the runtime must kill the whole process
# group, the background child included, not just this shell. Touches nothing.
set -u
seconds="${1:-300}"
case "$seconds" in
    '' | *[!0-9]*) echo "usage: slow_with_child.sh [SECONDS]" >&2; exit 2 ;;
esac
sleep "$seconds" &
child=$!
echo "slow_with_child.sh: shell pid $$, background child pid $child"
wait "$child"
