#!/bin/sh
# fail.sh [CODE] - a task that always fails, to see how a failed run looks.
# Writes one line to stdout and one to stderr, then exits with CODE (default 3).
# Touches nothing.
set -u
code="${1:-3}"
case "$code" in
    '' | *[!0-9]*) echo "usage: fail.sh [CODE 0-255]" >&2; exit 2 ;;
esac
if [ "$code" -gt 255 ]; then echo "usage: fail.sh [CODE 0-255]" >&2; exit 2; fi
echo "fail.sh: doing some work on stdout"
echo "fail.sh: something went wrong, exiting with $code" >&2
exit "$code"
