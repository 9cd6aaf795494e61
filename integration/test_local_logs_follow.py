"""`ql3 local logs -f` through the real binary: the followed bytes equal the log file's.

docs/protocols.md §3.8: a follower reads the attempt's log by raw byte offset (the next offset
is the previous one plus the bytes it got), prints them unchanged on stdout, and ends with one
status line on stderr; its exit code is the run's, as `run --wait` gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration

# Lines of every size (0 bytes to 200 KiB, across the 64 KiB read size), Chinese and
# invalid UTF-8, `\r` progress, a final line without a newline, written at random pauses
# (0 to 30 ms) in writes of random lengths that split lines and characters.
WRITER = r"""
import os, random, sys, time
rng = random.Random(int(sys.argv[1]))
sizes = [0, 1, 2, 3, 7, 63, 64, 65, 4095, 4096, 4097, 65535, 65536, 65537, 200000]
out = bytearray()
for n in range(120):
    size = rng.choice(sizes) if n % 3 == 0 else rng.randrange(0, 300)
    body = ("行%d:" % n).encode() + bytes(rng.choice(b"abc \xe4\xb8\xad\xff\r")
                                        for _ in range(size))
    out += body + b"\n"
out += "末行无换行".encode()
view = memoryview(bytes(out))
while view:
    step = rng.choice([1, 2, 5, 17, 100, 4096, 70000])
    os.write(1, view[:step])
    view = view[step:]
    if rng.random() < 0.3:
        time.sleep(rng.random() * 0.03)
"""


@contextmanager
def cpu_load(processes: int = 2) -> Iterator[None]:
    """Busy loops for the duration: the follower and the task compete for the CPU."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _log_file(ql3: Ql3, run_id: str) -> Path:
    task_id = ql3.json("local", "inspect", run_id)["task_id"]
    return ql3.data_dir / "logs" / task_id / f"{run_id}.1.log"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_followed_bytes_equal_the_log_file_under_cpu_load(
    ql3: Ql3, tmp_path: Path, seed: int
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "writer", "--schedule", "@once", "--",
                sys.executable, str(script), str(seed))
        with cpu_load():
            run = ql3.json("local", "run", "writer")
            follower = subprocess.run([QL3, "local", "logs", run["id"], "--follow"], check=False,
                                      env=ql3.env, capture_output=True, timeout=120)
        final = ql3.json("local", "inspect", run["id"])
        log = _log_file(ql3, run["id"]).read_bytes()
    finally:
        assert ql3.stop_serve(serve) == 0
    assert final["status"] == "succeeded"
    assert len(log) > 200_000
    assert follower.stdout == log  # byte for byte: nothing lost, nothing twice
    assert follower.returncode == 0
    assert follower.stderr.decode().splitlines()[-1].startswith("run writer#1 succeeded")


def test_follow_ends_with_the_status_line_and_the_runs_exit_code(ql3: Ql3) -> None:
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "fails", "--schedule", "@once", "--",
                "sh", "-c", "echo 开始; sleep 1; echo 结束; exit 3")
        run = ql3.json("local", "run", "fails")
        started = time.monotonic()
        follower = subprocess.run([QL3, "local", "logs", run["id"], "-f"], check=False, env=ql3.env,
                                  capture_output=True, text=True, timeout=60)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert time.monotonic() - started >= 0.5  # it followed the running task to its end
    assert follower.stdout == "开始\n结束\n"
    last = follower.stderr.splitlines()[-1]
    assert last.startswith("run fails#1 failed, exit code 3, took "), last
    assert len(last) <= 80
    assert follower.returncode == 1  # as `run --wait` of a run that did not succeed


def test_plain_logs_of_a_finished_run_print_no_status_line(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "quiet", "--schedule", "@once", "--", "sh", "-c", "exit 2")
    ql3.run("local", "run", "quiet", check=False)
    logs = ql3.run("local", "logs", "quiet@last", check=False)
    assert (logs.returncode, logs.stdout, logs.stderr) == (0, "", "")


def test_follow_of_a_log_split_at_every_read_boundary_is_byte_exact(ql3: Ql3) -> None:
    """A burst larger than one read (64 KiB) written while the follower is already waiting."""
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "burst", "--schedule", "@once", "--", sys.executable,
                "-c", "import os,time; time.sleep(1); os.write(1, b'\\xe4\\xb8\\xad' * 50000)")
        run = ql3.json("local", "run", "burst")
        follower = subprocess.Popen([QL3, "local", "logs", run["id"], "-f"], env=ql3.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] != "queued", 20)
        out, _ = follower.communicate(timeout=60)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert out == "中".encode() * 50000
    assert os.path.getsize(_log_file(ql3, run["id"])) == 150000


CAPPED_WRITER = r"""
import os, sys, time
data = open(sys.argv[1], "rb").read()
step = len(data) // 40
for start in range(0, len(data), step):
    os.write(1, data[start:start + step])
    time.sleep(0.05)
"""


def test_follow_of_a_capped_log_gets_the_head_one_gap_notice_and_the_tail(
    ql3: Ql3, tmp_path: Path
) -> None:
    """Edge profile, 16 MiB cap: a follower gets the head (8 MiB), one notice with the
    count of bytes left out, then the tail (the last 8 MiB), each byte once."""
    ql3.run("local", "init", "--change-profile", "--profile", "edge")
    lines = [f"第{n}行 ".encode() + b"x" * (n % 997) + b"\n" for n in range(60_000)]
    raw = b"".join(lines)
    assert len(raw) > 20 * 1024 * 1024
    source = tmp_path / "raw.bin"
    source.write_bytes(raw)
    script = tmp_path / "capped.py"
    script.write_text(CAPPED_WRITER)
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "flood", "--schedule", "@once", "--",
                sys.executable, str(script), str(source))
        run = ql3.json("local", "run", "flood")
        follower = subprocess.run([QL3, "local", "logs", run["id"], "-f"], check=False,
                                  env=ql3.env, capture_output=True, timeout=240)
        plain = subprocess.run([QL3, "local", "logs", run["id"]], check=False, env=ql3.env,
                               capture_output=True, timeout=60)
    finally:
        assert ql3.stop_serve(serve) == 0
    log = _log_file(ql3, run["id"])
    layout = dict(f.split("=") for f in
                  (log.parent / (log.name + ".layout")).read_text().split()[1:])
    head, tail_from = int(layout["head"]), int(layout["tail_from"])
    assert head == 8 * 1024 * 1024 and len(raw) - tail_from == 8 * 1024 * 1024
    assert follower.returncode == 0, follower.stderr[-500:]
    assert follower.stdout == raw[:head] + raw[tail_from:]
    notice = f"[ql3: {tail_from - head} bytes of output left out here by the log cap]"
    assert follower.stderr.decode().splitlines().count(notice) == 1
    assert plain.stdout == follower.stdout
    marker = b"\n[ql3: %d bytes of output left out here]\n" % (tail_from - head)
    assert log.read_bytes() == raw[:head] + marker + raw[tail_from:]
