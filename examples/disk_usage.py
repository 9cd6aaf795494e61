#!/usr/bin/env python3
"""Report the disk usage of a directory tree as JSON.

Usage: disk_usage.py DIR

Walks DIR without following symlinks (a symlink is counted as a symlink, never entered or
sized) and prints one JSON object on stdout:

  root            DIR as given
  total_bytes     sum of the apparent sizes (st_size) of regular files
  allocated_bytes sum of the space actually allocated to them (st_blocks * 512)
  file_count      regular files; a file with several hard links in the tree counts once
  dir_count       directories below DIR
  symlink_count   symlinks (not followed)
  other_count     sockets, FIFOs, device nodes
  errors          directories that could not be listed and entries that could not be
                  stat'ed (permission denied, removed meanwhile); the walk goes on
  largest_files   the 10 largest regular files: [{"path": relative path, "bytes": n}],
                  largest first, ties by path
  top_level       {name: total_bytes below it} for every entry directly in DIR

Reads only; never writes. Exit 0 on success (even with errors counted), 2 when DIR is not a
directory. Stdlib only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

LARGEST = 10


def disk_usage(root: str) -> dict[str, Any]:
    report: dict[str, Any] = {
        "root": root,
        "total_bytes": 0,
        "allocated_bytes": 0,
        "file_count": 0,
        "dir_count": 0,
        "symlink_count": 0,
        "other_count": 0,
        "errors": 0,
    }
    top_level: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    largest: list[tuple[int, str]] = []  # (-bytes, path): sorting puts the largest first

    # Each item: (directory path, its path relative to root, the top-level entry it is under).
    stack: list[tuple[str, str, str | None]] = [(root, "", None)]
    while stack:
        path, rel, top = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            report["errors"] += 1
            continue
        for entry in entries:
            entry_rel = os.path.join(rel, entry.name) if rel else entry.name
            entry_top = top if top is not None else entry.name
            top_level.setdefault(entry_top, 0)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                report["errors"] += 1
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                report["symlink_count"] += 1
            elif stat.S_ISDIR(mode):
                report["dir_count"] += 1
                stack.append((entry.path, entry_rel, entry_top))
            elif stat.S_ISREG(mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1:
                    if key in seen:
                        continue
                    seen.add(key)
                report["file_count"] += 1
                report["total_bytes"] += st.st_size
                report["allocated_bytes"] += st.st_blocks * 512
                top_level[entry_top] += st.st_size
                largest.append((-st.st_size, entry_rel))
                if len(largest) >= 4 * LARGEST:  # keep memory bounded on huge trees
                    largest = sorted(largest)[:LARGEST]
            else:
                report["other_count"] += 1

    report["largest_files"] = [{"path": p, "bytes": -n} for n, p in sorted(largest)[:LARGEST]]
    report["top_level"] = dict(sorted(top_level.items()))
    return report


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} DIR", file=sys.stderr)
        return 2
    root = argv[1]
    if not os.path.isdir(root):
        print(f"not a directory: {root}", file=sys.stderr)
        return 2
    json.dump(disk_usage(root), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
