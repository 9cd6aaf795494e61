# Sourced by ../report.sh: readings of this machine from /proc.
load_average() { cut -d ' ' -f 1-3 /proc/loadavg; }
memory_available() { awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo; }
