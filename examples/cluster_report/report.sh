#!/bin/sh
# A script bundle (docs/protocols.md §4.6), the one `bash scripts/cluster-demo` pushes with
# `ql3 cluster script push examples/cluster_report`: a worker fetches it by digest, verifies
# it and runs this entry point in a private copy of the directory (the current directory),
# so the files beside it are found by relative paths.
set -eu
. ./lib/measure.sh
echo "report: load average $(load_average), $(memory_available) MiB available"
echo "report: bundle files: $(find . -type f | sort | tr '\n' ' ')"
sleep 1
