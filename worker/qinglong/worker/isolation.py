"""Keeping a worker's attempts apart from each other and from the worker (docs/protocols.md
§4.8 "Attempt isolation").

Without isolation every attempt runs as the worker's uid, so one attempt can read another's
``/proc/<pid>/environ`` (its secrets), memory, working directory and bundle copy. Modes:

- ``uid``: the worker runs as root with CAP_SETUID, CAP_SETGID and CAP_KILL (to become the
  attempt's user and stop its processes) plus CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER (to
  hand the attempt its directory and remove what it wrote there) — all within Kubernetes' Pod
  Security baseline. Each attempt gets a uid (and the same gid) from ``--attempt-uids``,
  never one any process still has, and a private directory ``<attempt root>/<attempt id>``
  (0700, that uid; the bundle checkout when the task has a bundle) as its HOME and default
  working directory. The wrapper drops to that uid with ``no_new_privs``; the attempt's
  leftovers are every process with that uid. Its directory is emptied, and its entries in
  :data:`SCRATCH_DIRS` removed, by ``tree_remove.py`` running as that uid (when the uid is
  handed out and when it is given back).
- ``userns``: a user, mount and PID namespace per attempt with a private ``/proc`` (the
  worker's uid mapped to itself), private empty ``/tmp``, ``/var/tmp`` and ``/dev/shm``,
  the spool, attempt root and ``--token-file`` covered, the attempt's own directory bound
  back, every other mount read-only; the namespace's init stops what the command left.
  Works where unprivileged user namespaces are allowed (bare hosts; not Kubernetes'
  RuntimeDefault seccomp profile). A root worker also gives each attempt its own uid, as in
  ``uid`` mode, before entering the namespace.
- ``none``: as before; more than one attempt at a time is refused unless the operator says
  ``--allow-shared-uid`` (the CLI enforces it).

``auto`` picks ``uid`` when running as root with those capabilities, else ``userns`` when
the probe works, else ``none``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from qinglong.worker.bundle_extract import remove_tree

MODES = ("auto", "uid", "userns", "none")
DEFAULT_UID_RANGE = (2_000_000_000, 2_000_065_535)
# CAP_CHOWN 0, CAP_DAC_OVERRIDE 1, CAP_FOWNER 3, CAP_KILL 5, CAP_SETGID 6, CAP_SETUID 7
UID_MODE_CAPS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6,
                 "SETUID": 7}
PROBE_TIMEOUT_S = 10.0
WRAPPER_PATH = Path(__file__).with_name("group_wrapper.py")
REMOVER_PATH = Path(__file__).with_name("tree_remove.py")
REMOVER_TIMEOUT_S = 120.0
# shared directories every uid may write: an attempt uid's entries there are removed before
# the uid is handed out and when it is given back (a later attempt of that uid finds none)
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


class IsolationError(Exception):
    """The requested isolation cannot work here, or an attempt cannot be isolated
    (``message`` says why, never a secret)."""


@dataclass(frozen=True)
class Sandbox:
    """One attempt's isolation: ``directory`` its private HOME and default working
    directory (None in ``none`` mode), ``uid`` the attempt's own uid (``uid`` mode, and
    ``userns`` as root) whose every process is the attempt's, ``wrapper_args`` the
    isolation options for ``group_wrapper.py``."""

    directory: Path | None = None
    uid: int | None = None
    wrapper_args: tuple[str, ...] = ()


def missing_caps() -> list[str]:
    """Names of the ``uid`` mode's capabilities this process lacks (effective set), all of
    them when it is not root."""
    if os.geteuid() != 0:
        return sorted(UID_MODE_CAPS)
    effective = 0
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
    return sorted(name for name, bit in UID_MODE_CAPS.items() if not effective >> bit & 1)


def userns_works() -> bool:
    """True when the wrapper's ``--userns`` mechanism works here (a real probe: a child
    enters a user, mount and PID namespace and mounts its own /proc)."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", str(WRAPPER_PATH), "--probe-userns"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def uids_in_use() -> set[int]:
    """Every real, effective, saved or filesystem uid of a live process (a /proc scan)."""
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError), \
                open(f"/proc/{name}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    found.update(int(v) for v in line.split()[1:])
                    break
    return found


def processes_of(uid: int) -> list[int]:
    """Pids of live processes having ``uid`` as any of their uids ([] for uid 0)."""
    if uid == 0:
        return []
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError), \
                open(f"/proc/{name}/status", "rb") as fh:
            text = fh.read()
            state = uids = b""
            for line in text.splitlines():
                if line.startswith(b"State:"):
                    state = line.split()[1]
                elif line.startswith(b"Uid:"):
                    uids = line
            if state not in (b"Z", b"X") and str(uid).encode() in uids.split()[1:]:
                found.append(int(name))
    return found


class UidPool:
    """Attempt uids from ``first``..``last`` (inclusive): one is handed out only while no
    process has it and no attempt holds it — of this worker or of another worker on the
    host: each held uid is an exclusive ``flock`` on ``<lock_dir>/<uid>`` (0700, root's),
    which the kernel drops when a worker dies. Handed out round-robin, so a uid just
    returned is the last to be reused. Thread-safe. Raises IsolationError for a bad range
    or an unsafe lock directory."""

    def __init__(self, first: int, last: int, lock_dir: Path) -> None:
        if not 0 < first <= last < 2**32 - 1:
            raise IsolationError("the attempt uid range must be within 1–4294967294")
        self.first, self.last = first, last
        self._next = first
        self._held: dict[int, int] = {}  # uid -> fd holding its flock
        self._lock = threading.Lock()
        try:
            lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(lock_dir)
        except OSError as exc:
            raise IsolationError(f"uid lock directory {lock_dir} cannot be prepared "
                                 f"({exc.strerror})") from None
        if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & 0o077):
            raise IsolationError(f"uid lock directory {lock_dir} must be a private (0700) "
                                 "directory of this user")
        self._dir = lock_dir

    def take(self) -> int:
        """A free uid; IsolationError when every uid of the range is busy."""
        with self._lock:
            busy = uids_in_use() | set(self._held)
            size = self.last - self.first + 1
            for step in range(size):
                uid = self.first + (self._next - self.first + step) % size
                if uid in busy:
                    continue
                fd = self._reserve(uid)
                if fd is None:
                    continue  # another worker on this host holds it
                if uid in uids_in_use():  # a process took it between the scan and the lock
                    os.close(fd)
                    continue
                self._held[uid] = fd
                self._next = self.first + (uid - self.first + 1) % size
                return uid
        raise IsolationError("every attempt uid of the range is in use")

    def _reserve(self, uid: int) -> int | None:
        try:
            fd = os.open(self._dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def give_back(self, uid: int) -> None:
        """Return ``uid`` (call once its processes are gone; ``take`` checks again)."""
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)


def adopt_attempt_root(root: Path) -> bool:
    """Join ``root`` as a live worker: a shared flock on ``root/.worker-active`` held for the
    process's lifetime (the fd is left open on purpose). True when this worker is alone
    there (it got the lock exclusively first), so directories of attempts whose lock is
    free are a killed worker's and may be removed; False when another live worker uses it.
    Raises IsolationError when the marker cannot be opened (a symlink included)."""
    try:
        fd = os.open(root / ".worker-active", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise IsolationError(f"attempt root marker cannot be opened ({exc.strerror})"
                             ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return False
    fcntl.flock(fd, fcntl.LOCK_SH)  # downgrade: a later worker sees it is not alone
    return True


def prepare_attempt_root(path: Path, *, shared: bool) -> Path:
    """Create (or check) the directory holding the attempts' private directories and return
    its absolute path. ``shared`` (attempts run as other uids): root-owned, mode 0711 (they
    pass through, never list), and every parent searchable by others; else 0700, this uid.
    Raises IsolationError for a symlink, another owner, or a parent others cannot search."""
    path = path.absolute()
    mode = 0o711 if shared else 0o700
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise IsolationError(f"attempt root {path} is a symlink or not a directory")
        if info.st_uid != os.geteuid():
            raise IsolationError(f"attempt root {path} belongs to another user")
        os.chmod(path, mode)
    except OSError as exc:
        raise IsolationError(f"attempt root {path} cannot be prepared ({exc.strerror})"
                             ) from None
    if shared:
        for parent in path.parents:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                raise IsolationError(
                    f"attempt root {path}: {parent} is not searchable by other users "
                    "(chmod o+x, or choose another --attempt-root)")
    return path


class Isolation:
    """``none``: attempts run as the worker's uid, in its HOME (or the task's cwd); bundle
    checkouts stay in ``<spool>/work``."""

    mode = "none"
    work_dir: Path | None = None  # where bundle checkouts go (None: the spool's work/)

    def enter(self, attempt_id: str, checkout: Path | None) -> Sandbox:
        """Prepare ``attempt_id``'s sandbox (``checkout``: its bundle copy, already in
        :attr:`work_dir`). Raises IsolationError or OSError; nothing is left then."""
        return Sandbox()

    def leave(self, sandbox: Sandbox) -> None:
        """Remove the attempt's directory and return its uid; call after its leftovers
        were stopped. Never raises."""


class UidIsolation(Isolation):
    """``uid`` mode (and ``userns`` as root: ``userns`` True adds the namespaces)."""

    def __init__(self, root: Path, pool: UidPool, *, spool_dir: Path | None = None,
                 userns: bool = False, grace_s: float = 5.0,
                 secrets: tuple[Path, ...] = ()) -> None:
        self.mode = "userns" if userns else "uid"
        self._secrets = secrets
        self.work_dir = self.root = root
        self._pool = pool
        self._spool = spool_dir
        self._userns = userns
        self._grace_s = grace_s

    def enter(self, attempt_id: str, checkout: Path | None) -> Sandbox:
        directory = self.root / attempt_id
        uid = self._pool.take()
        try:
            run_as(uid)  # what a killed worker's attempt of this uid left in /tmp & co.
            if checkout is None:
                os.mkdir(directory, 0o700)
            _chown_tree(directory, uid)
        except BaseException:
            self._pool.give_back(uid)
            remove_tree(directory)
            raise
        args: tuple[str, ...] = ("--uid", str(uid), "--gid", str(uid))
        if self._userns:
            args += _userns_args(directory, self.root, self._spool, self._grace_s,
                                 self._secrets)
        return Sandbox(directory=directory, uid=uid, wrapper_args=args)

    def leave(self, sandbox: Sandbox) -> None:
        """As the attempt's own uid (a child process that dropped to it first), empty the
        attempt's directory and remove the uid's entries in :data:`SCRATCH_DIRS`; then
        remove the (empty) directory as the worker, fd by fd, and return the uid."""
        if sandbox.uid is not None:
            run_as(sandbox.uid, sandbox.directory)
        if sandbox.directory is not None:
            remove_tree(sandbox.directory)
        if sandbox.uid is not None:
            self._pool.give_back(sandbox.uid)


class UsernsIsolation(Isolation):
    """``userns`` mode for a worker that is not root: the namespaces alone."""

    mode = "userns"

    def __init__(self, root: Path, spool_dir: Path, grace_s: float,
                 secrets: tuple[Path, ...] = ()) -> None:
        self.work_dir = self.root = root
        self._spool = spool_dir
        self._grace_s = grace_s
        self._secrets = secrets

    def enter(self, attempt_id: str, checkout: Path | None) -> Sandbox:
        directory = self.root / attempt_id
        if checkout is None:
            os.mkdir(directory, 0o700)
        return Sandbox(directory=directory, wrapper_args=_userns_args(
            directory, self.root, self._spool, self._grace_s, self._secrets))

    def leave(self, sandbox: Sandbox) -> None:
        if sandbox.directory is not None:
            remove_tree(sandbox.directory)


def _userns_args(directory: Path, root: Path, spool: Path | None, grace_s: float,
                 secrets: tuple[Path, ...] = ()) -> tuple[str, ...]:
    args: tuple[str, ...] = ("--userns", "--keep", str(directory), "--hide", str(root))
    if spool is not None:
        args += ("--hide", str(spool))
    for secret in secrets:
        args += ("--hide-file", str(secret))
        parent = secret.parent
        with contextlib.suppress(OSError):
            info = os.stat(parent)
            if info.st_uid == os.geteuid() and not info.st_mode & 0o077 and parent != Path("/"):
                args += ("--hide", str(parent))  # private: a rotated file stays hidden too
    return (*args, "--grace", f"{grace_s:.3f}")


def run_as(uid: int, directory: Path | None = None) -> bool:
    """Run ``tree_remove.py`` as ``uid``: empty ``directory`` (when given) and remove the
    uid's entries from :data:`SCRATCH_DIRS`. True when it reported everything gone; never
    raises (what stays is retried when the uid is next handed out or given back)."""
    args = [] if directory is None else ["--empty", str(directory)]
    for path in SCRATCH_DIRS:
        args += ["--sweep", path]
    try:
        done = subprocess.run([sys.executable, "-I", "-S", str(REMOVER_PATH), str(uid), *args],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=REMOVER_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _chown_tree(top: Path, uid: int) -> None:
    """Give ``top`` and everything below it (fresh, root-owned, in a directory only root can
    enter) to ``uid``:``uid``; symlinks are never followed, ``top`` goes last."""
    for current, dirs, files in os.walk(top, topdown=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(current, name), uid, uid, follow_symlinks=False)
    os.chown(top, uid, uid, follow_symlinks=False)


def choose(requested: str, *, root: Path, spool_dir: Path, uids: tuple[int, int],
           grace_s: float, secrets: tuple[Path, ...] = ()) -> Isolation:
    """The isolation for ``requested`` (one of :data:`MODES`), its attempt root prepared.
    ``secrets``: the worker's credential files (``--token-file``), covered in ``userns``
    attempts (and their directory where it is private to the worker).
    Raises IsolationError when ``uid`` or ``userns`` was asked for explicitly and cannot
    work here (the message says what is missing)."""
    if requested not in MODES:
        raise IsolationError(f"unknown isolation {requested!r}")
    root_ok = os.geteuid() == 0 and not missing_caps()
    if requested == "auto":
        if root_ok:
            requested = "uid"
        elif os.geteuid() != 0 and userns_works():
            requested = "userns"
        else:
            requested = "none"
    if requested == "none":
        return Isolation()
    if requested == "uid" or os.geteuid() == 0:
        if not root_ok:
            raise IsolationError(
                f"--isolation {requested} as root needs the capabilities "
                f"{', '.join('CAP_' + c for c in missing_caps())}" if os.geteuid() == 0 else
                "--isolation uid needs root (with CAP_SETUID, CAP_SETGID, CAP_KILL, "
                "CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER)")
        if requested == "userns" and not userns_works():
            raise IsolationError("--isolation userns: user namespaces are not allowed here "
                                 "(kernel or seccomp); use --isolation uid")
        pool = UidPool(*uids, lock_dir=Path(tempfile.gettempdir()) / "ql3-attempt-uids")
        return UidIsolation(prepare_attempt_root(root, shared=True), pool,
                            spool_dir=spool_dir, userns=requested == "userns",
                            grace_s=grace_s, secrets=secrets)
    if not userns_works():
        raise IsolationError("--isolation userns: user namespaces are not allowed here "
                             "(kernel or seccomp)")
    return UsernsIsolation(prepare_attempt_root(root, shared=False), spool_dir, grace_s,
                           secrets)
