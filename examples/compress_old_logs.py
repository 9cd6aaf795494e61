#!/usr/bin/env python3
"""Compress old log files in one directory.

Usage: compress_old_logs.py DIR DAYS

Every ``*.log`` regular file directly in DIR (not recursive) whose modification time is more
than DAYS days ago becomes ``<name>.log.gz``, atomically: the compressed bytes go to
``<name>.log.gz.tmp``, are fsynced, renamed into place, the directory is fsynced, and only then
is the original removed. Symlinks are skipped (never followed), an existing ``.gz`` is never
overwritten, and a file that changes while it is being compressed is left alone. The ``.gz``
keeps the original's mtime and permission bits.

Prints one line per file and a total. Exit status: 0 when every candidate was handled,
1 when some file failed (the others are still processed), 2 for bad arguments.
Stdlib only.
"""

from __future__ import annotations

import gzip
import os
import stat
import sys
import time

CHUNK = 1024 * 1024


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compress_one(directory: str, name: str) -> tuple[int, int] | str:
    """Compress ``directory/name``; return (original bytes, compressed bytes) or a skip reason."""
    src_path = os.path.join(directory, name)
    final_path = src_path + ".gz"
    tmp_path = final_path + ".tmp"
    if os.path.lexists(final_path):
        return f"{name}.gz already exists"

    src_fd = os.open(src_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        before = os.fstat(src_fd)
        if not stat.S_ISREG(before.st_mode):
            return "not a regular file"
        # A leftover .tmp from an interrupted run is ours to replace (unlink never follows a link).
        if os.path.lexists(tmp_path):
            os.unlink(tmp_path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        tmp_fd = os.open(tmp_path, flags, stat.S_IMODE(before.st_mode))
        try:
            with (
                os.fdopen(tmp_fd, "wb") as raw,
                gzip.GzipFile(
                    filename=name, mode="wb", fileobj=raw, mtime=int(before.st_mtime)
                ) as gz,
            ):
                while chunk := os.read(src_fd, CHUNK):
                    gz.write(chunk)
                gz.close()
                raw.flush()
                os.fsync(raw.fileno())
                compressed = os.fstat(raw.fileno()).st_size
            after = os.fstat(src_fd)
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                os.unlink(tmp_path)
                return "changed while compressing"
            os.utime(tmp_path, ns=(before.st_atime_ns, before.st_mtime_ns))
            if os.path.lexists(final_path):
                os.unlink(tmp_path)
                return f"{name}.gz appeared meanwhile"
            os.rename(tmp_path, final_path)
        except BaseException:
            if os.path.lexists(tmp_path):
                os.unlink(tmp_path)
            raise
        fsync_dir(directory)
        os.unlink(src_path)
        fsync_dir(directory)
    finally:
        os.close(src_fd)
    return before.st_size, compressed


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {os.path.basename(argv[0])} DIR DAYS", file=sys.stderr)
        return 2
    directory, days_text = argv[1], argv[2]
    try:
        days = float(days_text)
    except ValueError:
        days = -1.0
    if not days >= 0:  # also refuses NaN
        print(f"DAYS must be a non-negative number, got {days_text!r}", file=sys.stderr)
        return 2
    if not os.path.isdir(directory):
        print(f"not a directory: {directory}", file=sys.stderr)
        return 2

    cutoff = time.time() - days * 86400
    done = skipped = failed = 0
    total_in = total_out = 0
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if not entry.name.endswith(".log"):
            continue
        if entry.is_symlink():
            print(f"skip {entry.name}: symlink")
            skipped += 1
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= cutoff:
                continue
            result = compress_one(directory, entry.name)
        except OSError as exc:
            print(f"FAIL {entry.name}: {exc.strerror or exc}", file=sys.stderr)
            failed += 1
            continue
        if isinstance(result, str):
            print(f"skip {entry.name}: {result}")
            skipped += 1
            continue
        size_in, size_out = result
        done += 1
        total_in += size_in
        total_out += size_out
        print(f"gzip {entry.name}: {size_in} -> {size_out} bytes")
    print(
        f"total: {done} compressed ({total_in} -> {total_out} bytes), "
        f"{skipped} skipped, {failed} failed"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
