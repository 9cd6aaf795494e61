"""Running one claimed attempt end to end (docs/protocols.md §4.2).

Order: [a script bundle: fetch, verify, extract into a fresh private directory —
``bundles.py``; a failure completes the attempt ``failed`` with its class and nothing runs] ->
spool file (capped: head, marker, tail) -> spawn the group behind the wrapper, holding the
attempt lock -> report ``started`` -> heartbeat, stream the output live (``live_log.py``) and
supervise (timeout, cancel, drain, lease loss, self-fence) -> stop the group -> stop the
leftovers (lock holders and group members) -> release the wrapper -> send the last live
chunk -> hash the spool -> ask a log-upload grant -> PUT (tried again while the object store
is down, the lease kept, up to ``upload_bound_s``; then reason ``log_unavailable``) ->
complete (with the cap's layout). An attempt that wrote no output skips the grant and PUT:
it completes through ``complete-no-output`` (``QL3-Wire: 2``), or, when the replica is an
older release (404), takes the path above. An attempt whose
command ended by itself but left processes behind keeps the outcome its exit code gives (a
retry of a script that succeeded would repeat its side effects), with reason
``leftovers_stopped`` once they are all stopped (TERM, grace, KILL) — never a silent
``succeeded``; when lock holders remain that it cannot find (another PID
namespace), it completes ``failed`` with reason ``leftover_processes``. A timed-out or
cancelled attempt keeps that outcome and reason (the leftovers are stopped and logged).
A 409 on any write (a live chunk's included), or a fence deadline passed without renewal
(checked again before the last chunk, the upload and ``complete``: a frozen worker that
resumes finds it passed), kills the group and every lock holder at once and forgets the
attempt: it is never completed by this worker
(integration/worker/test_worker_fencing.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from qinglong.shared import wire
from qinglong.worker import clock
from qinglong.worker.bundles import BundleFailure, BundleStore, Checkout
from qinglong.worker.client import ControlClient
from qinglong.worker.environment import attempt_environment, default_cwd
from qinglong.worker.errors import ControlRejectedError, LeaseLostError, SpoolError, WorkerError
from qinglong.worker.fencing import LeaseFence
from qinglong.worker.heartbeat import Heartbeater
from qinglong.worker.isolation import Isolation, IsolationError
from qinglong.worker.live_log import LiveLogSender, LiveStream
from qinglong.worker.process import (
    AttemptProcess,
    CwdMissingError,
    ExitStatus,
    decode_status,
    spawn_attempt,
)
from qinglong.worker.spool import (
    CappedCopier,
    CapResult,
    open_spool_file,
    secret_masker,
    spool_facts,
)
from qinglong.worker.upload import ObjectStoreUnavailableError, SpoolUploader

log = logging.getLogger("qinglong.worker")
SUPERVISE_S = 0.05
LAST_CHUNK_S = 3.0  # the last live chunk's budget before the log-upload grant is asked
UPLOAD_PAUSE_S = 2.0  # between rounds of log upload tries while the object store is down


@dataclass(frozen=True)
class RunnerConfig:
    """``spool_dir`` a prepared private directory; ``grace_s`` seconds between TERM and KILL
    when stopping a group for timeout, cancel or drain; ``worker_env`` the source of HOME and
    LANG (None: os.environ); HOME is also the working directory of a task without cwd
    (``/`` when HOME is unset or not a directory); ``uploader`` puts every attempt's log
    through one connection pool (the owner closes it). ``bundles`` fetches and checks out
    script bundles (None: an attempt naming one fails ``bundle_unavailable``). ``live``
    streams every attempt's output to control while it runs (live_log.py; None: not
    streamed). ``upload_bound_s``: how long an attempt whose command has ended keeps its
    lease (heartbeats go on) while the object store refuses its log; past it the attempt
    completes with its exit code's outcome and reason ``log_unavailable``.
    ``isolation`` keeps attempts apart (``isolation.py``): its private directory is the
    attempt's HOME and, without a task cwd, its working directory."""

    spool_dir: Path
    grace_s: float = 5.0
    worker_env: Mapping[str, str] | None = None
    uploader: SpoolUploader = field(default_factory=SpoolUploader)
    bundles: BundleStore | None = None
    isolation: Isolation = field(default_factory=Isolation)
    live: LiveLogSender | None = None
    upload_bound_s: float = 900.0


def _empty(spool_path: Path, cap: CapResult | None) -> bool:
    """True when the attempt wrote no output at all (nothing spooled, nothing capped)."""
    try:
        return cap is not None and cap.raw_bytes == 0 and spool_path.stat().st_size == 0
    except OSError:
        return False


class _Forget(Exception):  # noqa: N818  (control flow, never escapes this module)
    """The lease is lost or fenced: the group is dead, nothing is reported."""


class AttemptRunner:
    """One attempt in its own thread. ``claim_sent_at`` is the monotonic time (s) the claim
    request was sent (the first renewal); ``on_done(attempt_id)`` runs when the runner ends,
    whatever happened. ``request_stop(reason)`` stops the group (TERM, grace, KILL) and
    completes the attempt ``cancelled`` with that reason (``failed`` for ``worker_drain``, so
    a run whose task allows more attempts is retried on another worker). ``who``
    (``京东签到#3 attempt 1``) names the attempt in every log line (docs/operations.md,
    worker log)."""

    def __init__(self, client: ControlClient, attempt: wire.ClaimedAttempt,
                 claim_sent_at: float, config: RunnerConfig,
                 on_done: Callable[[str], None]) -> None:
        self.attempt = attempt
        self.attempt_id = attempt.lease.attempt_id
        # log lines name the run as people type it (TASK#N), never by a UUID
        self.who = f"{attempt.task_name}#{attempt.run_number} attempt {attempt.attempt_number}"
        self._client = client
        self._config = config
        self._on_done = on_done
        self._fence = LeaseFence(claim_sent_at, attempt.lease_ms)
        self._claim_sent_at = claim_sent_at
        self._stop_reason: str | None = None
        self._lost = threading.Event()
        self.storing = threading.Event()  # the command ended; the log is being stored
        self._thread = threading.Thread(target=self._main, name=f"ql3-attempt-{self.attempt_id}",
                                        daemon=True)

    def start(self) -> None:
        """Start the attempt's thread."""
        self._thread.start()

    def request_stop(self, reason: str) -> None:
        """Ask to stop the attempt and complete it ``cancelled`` with ``reason`` (first wins;
        ``failed`` for ``worker_drain``)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the runner to end; True when it did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _main(self) -> None:
        try:
            self._run()
        except _Forget:
            pass
        except Exception:
            log.exception("%s: runner failed", self.who)
        finally:
            self._on_done(self.attempt_id)

    def _complete(self, outcome: str, status: tuple[int | None, int | None],
                  log_facts: wire.LogFacts | None, reason: str | None,
                  layout: wire.LogLayout | None = None) -> None:
        if self._lost.is_set() or self._fence.expired():
            log.warning("%s: fenced before completion: attempt forgotten",
                        self.who)
            return
        report = wire.CompletionReport(lease=self.attempt.lease, outcome=outcome,
                                       exit_code=status[0], signal=status[1], log=log_facts,
                                       reason=reason,
                                       layout=layout if log_facts is not None else None)
        try:
            self._client.complete(report, deadline=self._fence.deadline)
        except LeaseLostError:
            log.warning("%s: lease lost at completion", self.who)
        except WorkerError as exc:
            log.error("%s: completion not recorded: %s", self.who, exc)
        else:
            log.info("%s: completed %s", self.who, outcome)

    def _complete_no_output(self, outcome: str, status: ExitStatus, reason: str | None) -> bool:
        """Complete an attempt whose output was empty without any log object (no grant, no
        PUT, no HEAD: ``client.complete_no_output``). False, having done nothing, when the
        replica is an older release (it answered 404, or did before): the caller then takes
        the v1 path. True otherwise, whatever the answer (as ``_complete``)."""
        if not self._client.v2_routes_ok():
            return False
        if self._lost.is_set() or self._fence.expired():
            log.warning("%s: fenced before completion: attempt forgotten", self.who)
            return True
        report = wire.CompletionReport(lease=self.attempt.lease, outcome=outcome,
                                       exit_code=status.exit_code, signal=status.signal,
                                       log=None, reason=reason)
        try:
            self._client.complete_no_output(report, deadline=self._fence.deadline)
        except LeaseLostError:
            log.warning("%s: lease lost at completion", self.who)
        except ControlRejectedError as exc:
            if exc.status == 404:
                return False
            log.error("%s: completion not recorded: %s", self.who, exc)
        except WorkerError as exc:
            log.error("%s: completion not recorded: %s", self.who, exc)
        else:
            log.info("%s: completed %s (no output)", self.who, outcome)
        return True

    def _run(self) -> None:
        a = self.attempt
        beats = Heartbeater(self._client, a.lease, self._fence, self._claim_sent_at,
                            a.heartbeat_ms, lambda: self.request_stop("cancel_requested"),
                            self._lost.set)
        beats.start()  # before a bundle is fetched: the lease lives on through a download
        checkout: Checkout | None = None
        try:
            if a.bundle_digest is not None:
                checkout = self._checkout()
                if checkout is None:
                    return None
            self._launch(checkout, beats)
        finally:
            beats.stop()
            if checkout is not None and self._config.bundles is not None:
                self._config.bundles.release(checkout)
        return None

    def _checkout(self) -> Checkout | None:
        """The attempt's private copy of its bundle (docs/protocols.md §4.7), or None after
        completing the attempt ``failed`` with the failure class: nothing runs. Raises
        _Forget when the lease is lost meanwhile."""
        a = self.attempt
        store = self._config.bundles
        assert a.bundle_digest is not None
        try:
            if store is None:
                raise BundleFailure("bundle_unavailable", "this worker has no bundle store")
            checkout = store.checkout(a, lambda: self._client.bundle(
                wire.BundleRequest(lease=a.lease, digest=a.bundle_digest or ""),
                deadline=self._fence.deadline), self._fence.deadline)
        except LeaseLostError:
            self._lost.set()
            raise _Forget from None
        except BundleFailure as exc:
            log.error("%s: not started: %s: %s", self.who, exc.reason, exc)
            self._complete("failed", (None, None), None, exc.reason)
            return None
        if self._lost.is_set() or self._fence.expired():
            store.release(checkout)
            raise _Forget
        return checkout

    def _launch(self, checkout: Checkout | None, beats: Heartbeater) -> None:
        a = self.attempt
        if checkout is not None:
            command = checkout.command
            env = attempt_environment({**a.env, "QL3_BUNDLE_DIR": str(checkout.directory)},
                                      self._config.worker_env)
        else:
            command = list(a.argv) if a.argv is not None else ["/bin/sh", "-c", a.shell or ""]
            env = attempt_environment(a.env, self._config.worker_env)
        try:
            spool_path, spool_fd = open_spool_file(self._config.spool_dir, self.attempt_id)
        except SpoolError as exc:
            log.error("%s: %s", self.who, exc)
            return self._complete("failed", (None, None), None, "spool_unavailable")
        pipe_r, pipe_w = os.pipe()
        sandbox = None
        try:
            sandbox = self._config.isolation.enter(
                self.attempt_id, None if checkout is None else checkout.directory)
            if sandbox.directory is not None and "HOME" not in a.env:
                env["HOME"] = str(sandbox.directory)
            if checkout is not None:
                cwd = str(checkout.directory)
            elif a.cwd is not None:
                cwd = a.cwd
            else:
                cwd = str(sandbox.directory or default_cwd(self._config.worker_env))
            proc = spawn_attempt(command, env, cwd, pipe_w,
                                 self._config.spool_dir / f"{self.attempt_id}.lock", sandbox)
        except (CwdMissingError, IsolationError, OSError, ValueError) as exc:
            for fd in (pipe_r, pipe_w, spool_fd):
                os.close(fd)
            if sandbox is not None:
                self._config.isolation.leave(sandbox)
            reason = "cwd_missing" if isinstance(exc, CwdMissingError) else "spawn_failed"
            log.error("%s: not started: %s", self.who, reason)
            spool_path.unlink(missing_ok=True)
            return self._complete("failed", (None, None), None, reason)
        os.close(pipe_w)
        self._fence.subscribe(proc.set_deadline)  # the wrapper fences a frozen worker
        live = self._config.live
        stream: LiveStream | None = None
        if live is not None:
            stream = live.open(a.lease, self._fence, self._lost.set)
        copier = CappedCopier(pipe_r, spool_fd, a.log_limit_bytes, spool_path,
                              on_output=None if stream is None else stream.offer,
                              masker=secret_masker(a))
        copier.start()
        try:
            self._report_started(proc)
            verdict, why, code = self._supervise(proc)
            cap = copier.finish()
            if self._client.token_refused.is_set():  # 401: nothing can be reported
                log.warning("%s: stopped, not reported (worker token refused)",
                            self.who)
                return None
            status = decode_status(code)
            outcome = verdict or ("succeeded" if status.exit_code == 0 else "failed")
            if stream is not None and live is not None:
                self._check_lease(proc)  # no chunk past the fence
                # the last chunk goes before the grant is asked; a 409 after it is ignored
                live.finish(stream, min(self._fence.deadline, clock.now() + LAST_CHUNK_S))
            self._check_lease(proc)  # a frozen worker resumed: its wrapper killed the group
            self.storing.set()
            if _empty(spool_path, cap) and self._complete_no_output(outcome, status, why):
                return None
            facts, unavailable = self._upload(spool_path, cap)
            self._check_lease(proc)
            self._complete(outcome, (status.exit_code, status.signal), facts,
                           "log_unavailable" if unavailable else why,
                           None if cap is None else cap.layout)
        finally:
            beats.stop()
            if stream is not None and live is not None:
                live.discard(stream)
            proc.abandon()  # after an error: the wrapper stops whatever still runs
            copier.finish(0.0)
            spool_path.unlink(missing_ok=True)
            self._config.isolation.leave(sandbox)
        return None

    def _check_lease(self, proc: AttemptProcess) -> None:
        if self._lost.is_set() or self._fence.expired():
            why = "lease lost (409)" if self._lost.is_set() else "lease fenced"
            proc.kill_now()
            proc.clear_leftovers(0.0)  # escapees too, at once: the lease is at stake
            proc.release()
            log.warning("%s: %s: group killed, attempt forgotten", self.who, why)
            raise _Forget

    def _report_started(self, proc: AttemptProcess) -> None:
        try:
            self._client.started(wire.StartedReport(lease=self.attempt.lease, pid=proc.pid),
                                 deadline=self._fence.deadline)
        except LeaseLostError:
            self._lost.set()
        except WorkerError as exc:
            log.warning("%s: started not reported: %s", self.who, exc)

    def _supervise(self, proc: AttemptProcess) -> tuple[str | None, str | None, int]:
        """Wait for the command, stop its leftovers, release the wrapper; returns (outcome or
        None for "by exit status", reason, command status code). Raises _Forget after
        killing everything when fenced."""
        timeout_ms = self.attempt.timeout_ms
        timeout_at = None if timeout_ms is None else clock.now() + timeout_ms / 1000.0
        verdict: str | None = None
        why: str | None = None
        while True:
            self._check_lease(proc)
            code = proc.wait(SUPERVISE_S)
            if code is not None:
                break
            if timeout_at is not None and clock.now() >= timeout_at:
                verdict, why = "timed_out", "timeout"
            elif self._stop_reason is not None:
                # a drain is the worker's own stop, not the user's cancel: the attempt
                # failed, and the task's retry rules decide whether the run goes on
                verdict = "failed" if self._stop_reason == "worker_drain" else "cancelled"
                why = self._stop_reason
            else:
                continue
            code = proc.stop(self._config.grace_s)
            break
        self._check_lease(proc)
        report = proc.clear_leftovers(self._config.grace_s)
        if report.found or report.unresolved:
            log.warning("%s: %s", self.who, report.describe())
            if verdict is None and report.unresolved:  # holders it cannot stop
                verdict, why = "failed", "leftover_processes"
            elif why is None:  # stopped: the exit code decides, as locally; recorded
                why = "leftovers_stopped"
        proc.release()
        return verdict, why, code

    def _upload(self, spool_path: Path,
                cap: CapResult | None) -> tuple[wire.LogFacts | None, bool]:
        """Store the spool as the attempt's log: (its facts, or None; True when it could
        not be stored because the object store stayed unavailable). While the object store
        refuses (connection errors, 5xx), the PUT is tried again — a fresh grant each round
        — for up to ``upload_bound_s``; heartbeats keep the lease meanwhile, and each round
        stays within the fence deadline as it is then. A drain's stop ends the wait."""
        if cap is None:  # the copier did not end (an escapee holds the pipe): no log
            log.error("%s: output copier did not finish: log not uploaded",
                      self.who)
            return None, False
        facts = spool_facts(spool_path)
        log_facts = wire.LogFacts(sha256=facts.sha256, size_bytes=facts.size_bytes)
        give_up = clock.now() + self._config.upload_bound_s
        warned_at: float | None = None
        while True:
            if self._lost.is_set() or self._fence.expired():
                return None, False  # the caller's lease check forgets the attempt
            try:
                grant = self._client.log_upload(
                    wire.LogUploadRequest(lease=self.attempt.lease, log=log_facts),
                    deadline=self._fence.deadline)
                self._config.uploader.put(grant, spool_path,
                                          deadline=min(self._fence.deadline, give_up))
            except LeaseLostError:
                self._lost.set()
                return None, False
            except ObjectStoreUnavailableError as exc:
                now = clock.now()
                if now >= give_up or self._stop_reason == "worker_drain":
                    log.error("%s: log not stored: %s; completing with reason "
                              "log_unavailable", self.who, exc)
                    return None, True
                if warned_at is None or now - warned_at >= 60.0:
                    warned_at = now
                    log.warning("%s: %s; keeping the lease and trying again (for "
                                "up to %.0f s more)", self.who, exc, give_up - now)
                time.sleep(min(UPLOAD_PAUSE_S, max(0.0, give_up - now)))
                continue
            except WorkerError as exc:
                log.error("%s: log not uploaded: %s", self.who, exc)
                return None, False
            return log_facts, False
