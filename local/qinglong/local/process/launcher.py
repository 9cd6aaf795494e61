"""The local process launcher (docs/protocols.md §3.2, ADR-0069 §2).

``LocalProcessLauncher.start`` runs the six ADR steps in order; every failure happens before
any user code runs (the wrapper also waits on a start gate the owner opens only after the
handle is durably saved). The launcher never moves attempt statuses.
"""

from __future__ import annotations

import marshal
import os
import signal
import subprocess
import sys
from importlib.util import MAGIC_NUMBER

from qinglong.local.process.launch_request import (
    LOG_CAP_PATH,
    OUTPUT_MASK_PATH,
    LaunchConfig,
    LaunchRequest,
    validate_request,
)
from qinglong.local.process.launched import GATE_BYTE, LaunchedProcess, LaunchStateError
from qinglong.local.process.paths import UnsafePathError, open_output_dir, open_output_file
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.process.wrapper_digest import (
    LOG_CAP_SHA256,
    OUTPUT_MASK_SHA256,
    WRAPPER_SHA256,
)
from qinglong.local.process.wrapper_image import (
    above_stdio,
    load_wrapper,
    read_verified,
    sealed_memfd,
)
from qinglong.shared.errors import LaunchError, UnsafeSignalError, ValidationError
from qinglong.shared.faults import fault_point
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ports import ReceiptJournal
from qinglong.shared.process.identity import capture_handle
from qinglong.shared.process.signals import signal_group, signal_process

__all__ = [
    "ENV_ATTEMPT_ID",
    "ENV_GATE_FD",
    "ENV_LC_CTYPE",
    "ENV_RECEIPT_DIR",
    "ENV_RUN_ID",
    "GATE_BYTE",
    "WRAPPER_EXIT_NOT_STARTED",
    "WRAPPER_SHA256",
    "LaunchConfig",
    "LaunchRequest",
    "LaunchStateError",
    "LaunchedProcess",
    "LocalProcessLauncher",
]

# The wrapper's environment contract (wrapper.pyw holds the same literals; a test pins them).
ENV_RUN_ID = "QL3_LAUNCH_RUN_ID"
ENV_ATTEMPT_ID = "QL3_LAUNCH_ATTEMPT_ID"
ENV_GATE_FD = "QL3_LAUNCH_GATE_FD"
ENV_LC_CTYPE = "QL3_LAUNCH_LC_CTYPE"  # "-": the user set none; "=value": the user's value
ENV_RECEIPT_DIR = "QL3_RECEIPT_DIR"
ENV_LOG_CAP = "QL3_LAUNCH_LOG_CAP"
ENV_LOG_DIR_FD = "QL3_LAUNCH_LOG_DIR_FD"
ENV_LOG_NAME = "QL3_LAUNCH_LOG_NAME"
ENV_SECRET_NAMES = "QL3_LAUNCH_SECRET_NAMES"  # noqa: S105 (a variable name)
ENV_LIB_FDS = "QL3_LAUNCH_LIB_FDS"
WRAPPER_EXIT_NOT_STARTED = 125  # the wrapper ran no user code
ABORT_TERM_GRACE_S = 1.0
ABORT_KILL_WAIT_S = 5.0


class LocalProcessLauncher:
    """Starts one attempt's wrapper per :meth:`start` call (ADR-0069 §2).

    ``journal`` is the durable receipt journal port; ``store`` defaults to a
    :class:`ReceiptStore` on ``config.receipt_root``. Construction touches nothing on disk.
    """

    def __init__(
        self, config: LaunchConfig, journal: ReceiptJournal, store: ReceiptStore | None = None
    ) -> None:
        self._config = config
        self._journal = journal
        self._store = store if store is not None else ReceiptStore(config.receipt_root)
        self._libraries: dict[str, bytes] = {}

    @property
    def store(self) -> ReceiptStore:
        """The receipt store the wrapper publishes into."""
        return self._store

    def start(self, request: LaunchRequest) -> LaunchedProcess:
        """Start the wrapper for ``request`` with its start gate closed; return its handle.

        The user command runs only after :meth:`LaunchedProcess.open_gate`.

        Raises:
            ValidationError (InvalidIdentifierError, LaunchLimitError): step 1.
            LaunchError: ``step`` 2–6; messages carry no user values. On step 6 the wrapper's
                group has been stopped (TERM, then KILL) and reaped.
        """
        config, store = self._config, self._store
        # ADR-0069 §2 step 1: validate ids, argv, env, cwd, output path and byte budget
        validate_request(request, config)
        # ADR-0069 §2 step 2: O_NOFOLLOW wrapper, pinned SHA-256, copied into a sealed memfd
        memfd = load_wrapper(config.wrapper_path, config.wrapper_max_bytes, WRAPPER_SHA256)
        out_fd = gate_r = gate_w = -1
        try:
            # ADR-0069 §2 step 3: private receipt shard, output file opened component-wise
            try:
                shard = store.prepare_shard(request.attempt_id)
                out_fd = open_output_file(config.log_root, request.output_path)
            except (OSError, UnsafePathError, ValidationError) as exc:
                msg = "receipt shard or output file is unavailable or unsafe"
                raise LaunchError(3, msg) from exc
            receipt_path = store.receipt_path(request.attempt_id)
            # ADR-0069 §2 step 4: register the exact (run, attempt) durably before spawn
            try:
                self._journal.register(request.run_id, request.attempt_id, receipt_path)
            except Exception as exc:
                raise LaunchError(4, "receipt journal registration failed") from exc
            fault_point("after_register")  # crash matrix: registered, nothing spawned
            # ADR-0069 §2 step 5: only then spawn the wrapper in a new process group
            try:
                gate_r, gate_w = os.pipe2(os.O_CLOEXEC)
                gate_r = above_stdio(gate_r)
            except OSError as exc:
                raise LaunchError(5, "start gate pipe unavailable") from exc
            popen = self._spawn(request, memfd, gate_r, out_fd, shard)
        except BaseException:
            if gate_w >= 0:
                os.close(gate_w)
            raise
        finally:
            for fd in (memfd, out_fd, gate_r):
                if fd >= 0:
                    os.close(fd)
        # ADR-0069 §2 step 6: capture identity at once; a bare pid is never returned
        handle, pidfd = self._capture(popen, gate_w)
        return LaunchedProcess(
            handle=handle,
            popen=popen,
            pidfd=pidfd,
            gate_fd=gate_w,
            receipt_path=receipt_path,
            lock_path=store.lock_path(request.attempt_id),
            output_path=request.output_path,
        )

    def _spawn(
        self, request: LaunchRequest, memfd: int, gate_r: int, out_fd: int, shard: str
    ) -> subprocess.Popen[bytes]:
        env = dict(request.env)
        env[ENV_RUN_ID] = request.run_id
        env[ENV_ATTEMPT_ID] = request.attempt_id
        env[ENV_GATE_FD] = str(gate_r)
        lc_ctype = request.env.get("LC_CTYPE")
        env[ENV_LC_CTYPE] = "-" if lc_ctype is None else "=" + lc_ctype
        env[ENV_RECEIPT_DIR] = shard
        if request.secret_names:  # names only: the values are already in the environment
            env[ENV_SECRET_NAMES] = ",".join(request.secret_names)
        dir_fd = -1
        libs: list[int] = []
        try:
            if self._config.log_cap_bytes or request.secret_names:  # the wrapper copies a pipe
                for path, digest in ((OUTPUT_MASK_PATH, OUTPUT_MASK_SHA256),
                                     (LOG_CAP_PATH, LOG_CAP_SHA256)):
                    libs.append(sealed_memfd(self._library(path, digest)))
                env[ENV_LIB_FDS] = ",".join(map(str, libs))
            if self._config.log_cap_bytes:
                env[ENV_LOG_CAP] = str(self._config.log_cap_bytes)
                try:  # where the wrapper keeps the rolling tail and publishes the layout
                    dir_fd = above_stdio(open_output_dir(self._config.log_root,
                                                         request.output_path))
                    env[ENV_LOG_DIR_FD] = str(dir_fd)
                    env[ENV_LOG_NAME] = os.path.basename(request.output_path)
                except (OSError, UnsafePathError, ValidationError):
                    dir_fd = -1  # the cap still holds: head and marker, no tail
            args = [self._config.python, "-I", "-S", f"/proc/self/fd/{memfd}", *request.argv]
            return subprocess.Popen(
                args,
                env=env,
                cwd=request.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out_fd,
                stderr=out_fd,
                pass_fds=(memfd, gate_r, *libs, *([dir_fd] if dir_fd >= 0 else [])),
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise LaunchError(5, "wrapper could not be spawned") from exc
        finally:
            for fd in (*libs, dir_fd):
                if fd >= 0:
                    os.close(fd)

    def _library(self, path: str, digest: str) -> bytes:
        """What the wrapper runs of ``path`` for a piped log: the file verified against
        ``digest`` (LaunchError(2) otherwise), compiled here and marshalled after the import
        magic number when the wrapper runs on this interpreter (compiling in the wrapper
        would cost ~0.8 MiB of its RSS), else the verified source. Cached per launcher."""
        image = self._libraries.get(path)
        if image is None:
            source = read_verified(path, self._config.wrapper_max_bytes, digest)
            image = source
            if os.path.realpath(self._config.python) == os.path.realpath(sys.executable):
                image = MAGIC_NUMBER + marshal.dumps(compile(source, path, "exec"))
            self._libraries[path] = image
        return image

    def _capture(self, popen: subprocess.Popen[bytes], gate_w: int) -> tuple[ProcessHandle, int]:
        """Step 6: identity, group leadership and a pidfd, or stop the group and fail."""
        pidfd = -1
        try:
            handle = capture_handle(popen.pid)
            if handle.pgid != popen.pid:
                raise LaunchError(6, "wrapper does not lead its own process group")
            pidfd = os.pidfd_open(popen.pid)
        except Exception as exc:
            if pidfd >= 0:
                os.close(pidfd)
            _abort(popen, gate_w)
            raise LaunchError(6, "wrapper identity could not be captured") from exc
        return handle, pidfd


def _abort(popen: subprocess.Popen[bytes], gate_w: int) -> None:
    """Abandon the gate, TERM then KILL the wrapper's group (never pgid <= 1), and reap."""
    os.close(gate_w)  # the wrapper reads EOF: no user code can start any more
    pid = popen.pid
    for sig, grace in ((signal.SIGTERM, ABORT_TERM_GRACE_S), (signal.SIGKILL, ABORT_KILL_WAIT_S)):
        try:
            if not signal_group(pid, sig):
                signal_process(pid, sig)
        except (UnsafeSignalError, OSError):
            pass
        try:
            popen.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue
