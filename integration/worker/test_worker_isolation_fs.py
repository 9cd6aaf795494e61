"""What an isolated attempt may touch on the file system (docs/protocols.md §4.8): a real
`ql3 worker run` against the fake control over real HTTP, real processes, real mounts.

- ``userns`` with a worker that is not root: the worker's token file and code are out of
  the attempt's reach (read-only file system, token covered), its own directory and /tmp
  stay writable.
- ``uid``: removing the attempt's directory never follows a symlink swapped in while the
  removal runs, and a uid handed out again finds nothing the previous attempt of that uid
  left in /tmp, /var/tmp or /dev/shm."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_control import TOKEN, FakeControl, make_attempt
from worker_kit import wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (uids, setpriv)")]

QL3 = str(Path(sys.executable).parent / "ql3")
NOBODY = 65534
# The worker as an ordinary user. Its interpreter may lie below root's 0700 home (as on
# the test machines), so it keeps CAP_DAC_READ_SEARCH to read it; the attempt, run in a
# new user namespace, keeps no capability of the host's.
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"]


class Worker:
    def __init__(self, control: FakeControl, base: Path, *extra: str,
                 prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.stderr_path = base / "worker.stderr"
        full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if "--token-file" not in extra:
            full["QL3_WORKER_TOKEN"] = TOKEN
        full.update(env or {})
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*prefix, QL3, "worker", "run", "--control-url", control.url, "--name", "w1",
                 "--spool-dir", str(base / "spool"), "--attempt-root",
                 str(base / "attempts"), "--grace", "0.5", *extra],
                env=full, stdout=subprocess.DEVNULL, stderr=err, cwd=base)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def control() -> Iterator[FakeControl]:
    fake = FakeControl().start()
    yield fake
    fake.close()


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory outside /tmp, /var/tmp and /dev/shm (an attempt gets those privately),
    searchable by every uid."""
    path = Path(tempfile.mkdtemp(prefix="ql3-iso-fs-", dir="/run"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def _lock_free(path: Path) -> bool:
    """True when nobody holds the flock on ``path`` (taken and dropped at once)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _log_of(control: FakeControl, attempt: dict[str, Any]) -> str:
    wanted = attempt["lease"]["attempt_id"]
    index = next(i for i, m in enumerate(control.seen("log-upload"))
                 if m["lease"]["attempt_id"] == wanted)
    wait_until(lambda: len(control.puts) > index, 10.0, "the log stored")
    return control.puts[index][1].decode("utf-8", "replace")


@pytest.mark.parametrize("token_dir", ["private", "shared"])
def test_userns_attempt_of_a_plain_worker_cannot_read_its_token_nor_write_its_code(
        control, base, workers, token_dir):
    """The worker runs as ``nobody`` with ``--isolation userns`` and ``--token-file``; the
    task (also ``nobody``, in its namespace) tries to read the token file and to change a
    package directory the worker's user owns: both fail, while writing its own directory
    and /tmp works. ``private``: the token's directory is the worker's own 0700 one;
    ``shared``: a root-owned 0755 directory (only the file itself is covered)."""
    token_home = base / "secret"
    token_home.mkdir(mode=0o700 if token_dir == "private" else 0o755)
    token_file = token_home / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    package = base / "site-packages" / "qinglong" / "worker"
    package.mkdir(parents=True)
    (package / "group_wrapper.py").write_text("# the worker's code\n")
    original = (package / "group_wrapper.py").read_bytes()
    owned = [base, package.parent.parent, package.parent, package, package / "group_wrapper.py",
             token_file]
    if token_dir == "private":
        owned.append(token_home)
    for path in owned:
        os.chown(path, NOBODY, NOBODY)
    attempt = make_attempt(
        'echo "me=$(id -u)"; cat "$TOKEN_FILE"; echo; ls "$(dirname "$TOKEN_FILE")"; '
        'echo tampered >> "$PKG/group_wrapper.py" && echo PKG-CHANGED; '
        'touch "$PKG/evil.py" && echo PKG-ADDED; '
        'echo 签到 > own.txt && cat own.txt && echo OWN-OK; '
        'echo t > /tmp/scratch && echo TMP-OK; echo DONE',
        env={"TOKEN_FILE": str(token_file), "PKG": str(package)})
    control.queue.append(attempt)
    workers.append(Worker(control, base, "--isolation", "userns", "--token-file",
                          str(token_file), prefix=tuple(AS_NOBODY)))
    done = control.wait_for("complete", timeout_s=30.0)[0]
    log = _log_of(control, attempt)
    assert "DONE" in log and done["outcome"] == "succeeded", workers[0].stderr() + log
    assert f"me={NOBODY}" in log  # the task runs as the worker's own uid
    assert TOKEN not in log
    assert "PKG-CHANGED" not in log and "PKG-ADDED" not in log
    assert (package / "group_wrapper.py").read_bytes() == original
    assert not (package / "evil.py").exists()
    assert "签到\nOWN-OK" in log and "TMP-OK" in log


def test_uid_leave_never_follows_a_symlink_swapped_into_the_tree(control, base, workers):
    """The attempt leaves ``X`` with many unreadable subdirectories (so removing them means
    changing their mode); a root process outside the attempt swaps ``X`` for a symlink to a
    root-owned directory holding the same names as soon as the removal has begun inside
    ``X``. The outside directory keeps its modes and contents; the attempt's directory is
    gone afterwards."""
    names = [f"{i:04d}" for i in range(3000)]
    outside = base / "outside"
    outside.mkdir(mode=0o755)
    for name in names:
        (outside / name).mkdir(mode=0o755)
    (outside / "data.txt").write_text("root's data\n")
    attempt = make_attempt(
        "mkdir X && cd X && seq -w 0 2999 | xargs mkdir && chmod 0300 * && cd .. && "
        "while [ ! -e go ]; do sleep 0.05; done; echo READY")
    top = base / "attempts" / attempt["lease"]["attempt_id"]
    control.queue.append(attempt)
    workers.append(Worker(control, base, "--isolation", "uid"))
    try:
        wait_until(lambda: (top / "X").is_dir() and len(os.listdir(top / "X")) == 3000
                   and all(os.lstat(top / "X" / n).st_mode & 0o777 == 0o300
                           for n in os.listdir(top / "X")), 30.0, "the tree made")
    except AssertionError:
        raise AssertionError(workers[0].stderr() + str(control.seen("complete"))) from None
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(top), str(outside)],
                               stdout=subprocess.PIPE, text=True)
    assert swapper.stdout is not None
    assert swapper.stdout.readline() == "ARMED\n"
    (top / "go").touch()
    control.wait_for("complete", timeout_s=30.0)
    out, _ = swapper.communicate(timeout=30)
    left = int(out.split()[-1])
    assert left > 0, "the swap came after the walk left X: nothing was tested"
    changed = [n for n in names if (outside / n).stat().st_mode & 0o7777 != 0o755]
    assert changed == [], f"{len(changed)} outside directories changed mode"
    assert outside.stat().st_mode & 0o7777 == 0o755
    assert (outside / "data.txt").read_text() == "root's data\n"
    assert sorted(os.listdir(outside)) == sorted([*names, "data.txt"])
    wait_until(lambda: not os.path.lexists(top), 15.0, "the attempt's directory removed")


SWAPPER = r"""
import os, sys
top, outside = sys.argv[1], sys.argv[2]
x = os.path.join(top, "X")
order = os.listdir(x)
watch = [os.path.join(x, order[0]), os.path.join(x, order[-1])]
print("ARMED", flush=True)
def touched(path):
    try:
        return os.lstat(path).st_mode & 0o777 != 0o300
    except FileNotFoundError:
        return True
while not any(touched(p) for p in watch):
    pass
os.rename(x, os.path.join(top, "X-moved"))
os.symlink(outside, x)
left = 0
for name in order:
    try:
        left += os.lstat(os.path.join(top, "X-moved", name)).st_mode & 0o777 == 0o300
    except OSError:
        pass
print("LEFT", left, flush=True)
"""


@pytest.mark.parametrize("mode", ["uid", "userns"])
def test_a_uid_handed_out_again_finds_nothing_its_last_attempt_left(control, base, workers,
                                                                    mode):
    """Two attempts in a row on the same uid (every other uid of the 64-uid range is held
    by the test, as another worker on the host would): the first leaves a file in /tmp, in
    /dev/shm and a directory in /var/tmp; the second finds none of them, and neither does
    the host afterwards."""
    first_uid = 2_100_000_000 + secrets.randbelow(10_000) * 64
    locks = base / "tmpdir" / "ql3-attempt-uids"
    locks.mkdir(parents=True, mode=0o700)
    held = []
    for uid in range(first_uid + 1, first_uid + 64):
        fd = os.open(locks / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    tag = "ql3-leak-" + secrets.token_hex(6)
    leaks = [Path("/tmp") / tag, Path("/dev/shm") / tag, Path("/var/tmp") / tag]
    try:
        first = make_attempt(f'id -u; echo left > /tmp/{tag}; echo left > /dev/shm/{tag}; '
                             f'mkdir /var/tmp/{tag} && echo left > /var/tmp/{tag}/x')
        second = make_attempt(f"id -u; ls -d /tmp/{tag} /dev/shm/{tag} /var/tmp/{tag} "
                              "2>/dev/null | sed 's/^/FOUND /'; echo CHECKED")
        control.queue.append(first)
        workers.append(Worker(control, base, "--isolation", mode, "--attempt-uids",
                              f"{first_uid}-{first_uid + 63}",
                              env={"TMPDIR": str(base / "tmpdir")}))
        control.wait_for("complete", timeout_s=30.0)
        # the second is handed out once the worker has given the uid back (its flock free)
        wait_until(lambda: _lock_free(locks / str(first_uid)), 30.0, "the uid given back")
        control.queue.append(second)
        control.wait_for("complete", timeout_s=30.0, count=2)
        first_log, second_log = _log_of(control, first), _log_of(control, second)
        assert first_log.split()[0] == second_log.split()[0] == str(first_uid)
        assert "CHECKED" in second_log
        assert "FOUND" not in second_log
        wait_until(lambda: not any(os.path.lexists(p) for p in leaks), 10.0,
                   "the host's shared directories clean")
    finally:
        for fd in held:
            os.close(fd)
        for path in leaks:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
