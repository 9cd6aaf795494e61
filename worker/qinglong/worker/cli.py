"""``ql3 worker run``: the remote worker's command line (docs/protocols.md §4.2).

Bad input is one line on stderr and exit 2 (``ValidationError`` through ``ql3``'s error
mapping); control unreachable at start is retried with backoff and one log line per try;
SIGTERM or SIGINT drains and exits 0.
"""

from __future__ import annotations

import logging
import signal
import socket
from pathlib import Path
from types import FrameType

import click

from qinglong.shared.control_urls import parse_control_urls
from qinglong.shared.errors import ValidationError
from qinglong.shared.wire import MAX_CLAIM, WireFormatError, check_labels


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValidationError("--labels", "expected k=v pairs separated by commas")
        labels[key.strip()] = value.strip()
    try:
        return check_labels(labels, "--labels")
    except WireFormatError as exc:
        raise ValidationError("--labels", str(exc).partition(": ")[2]) from None


def _control_urls(text: str) -> list[str]:
    """``--control-url``: one or more base URLs separated by commas, in the order tried
    (``qinglong.shared.control_urls``; ValidationError, exit 2, for a bad list)."""
    return parse_control_urls(text)


def _default_spool_dir() -> Path:
    import os
    import tempfile

    return Path(tempfile.gettempdir()) / f"ql3-worker-{os.getuid()}" / "spool"


def _default_attempt_root() -> Path:
    import os
    import tempfile

    return Path(tempfile.gettempdir()) / f"ql3-worker-{os.getuid()}" / "attempts"


def _uid_range(text: str) -> tuple[int, int]:
    """``--attempt-uids FIRST-LAST`` (ValidationError, exit 2, otherwise)."""
    first, sep, last = text.partition("-")
    if not (sep and first.isdigit() and last.isdigit()
            and 0 < int(first) <= int(last) < 2**32 - 1):
        raise ValidationError("--attempt-uids", "expected FIRST-LAST, 1 ≤ FIRST ≤ LAST "
                              "< 4294967295")
    if int(last) - int(first) + 1 < 64:
        raise ValidationError("--attempt-uids", "the range must hold at least 64 uids")
    return int(first), int(last)


SHARED_UID_REFUSAL = (
    "more than one attempt at a time with no isolation: tasks would run as one user and "
    "could read each other's secrets (/proc/<pid>/environ); run as root for "
    "--isolation uid, allow user namespaces for --isolation userns, use --concurrency 1, "
    "or accept the risk with --allow-shared-uid")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def worker() -> None:
    """The cluster's remote worker: claims attempts from control over HTTP and runs them.

    It holds no database or bucket credentials, only its worker-pool token.
    """


@worker.command()
@click.option("--control-url", required=True, envvar="QL3_CONTROL_URL",
              help="Base URL of control, http(s)://host:port, or several replicas' base URLs "
                   "separated by commas, tried in order: on a connection failure (or a 502/"
                   "503/504) a request moves to the next one. Without /v1: a URL ending in "
                   "/v1 is refused (exit 2). Env QL3_CONTROL_URL.")
@click.option("--concurrency", type=int, default=1, show_default=True,
              help=f"Attempts run at once (1–{MAX_CLAIM}).")
@click.option("--labels", default="", help="Labels this worker declares, k=v,k2=v2 "
              "(bounded by the token's pool).")
@click.option("--name", default=None, help="Worker name (default: the host name); a "
              "restart under the same name is a new incarnation.")
@click.option("--token-file", default=None, type=str,
              help="File holding the worker token (mode 0600). Read again when control "
                   "refuses the token (401): a new token there (rotated, the file replaced "
                   "atomically) is used from then on. Tasks run as this user and can read "
                   "the file; they cannot read QL3_WORKER_TOKEN. Default: env "
                   "QL3_WORKER_TOKEN (never reloaded).")
@click.option("--spool-dir", default=None, type=str,
              help="Private (0700) directory for output spools, the verified script-bundle "
                   "cache (bundles/) and each bundle attempt's private copy (work/) "
                   "[default: $TMPDIR/ql3-worker-<uid>/spool].")
@click.option("--drain-budget", type=float, default=30.0, show_default=True,
              help="Seconds running attempts get to finish after SIGTERM/SIGINT before their "
                   "groups are stopped and reported failed (reason worker_drain; the task's "
                   "retry rules decide).")
@click.option("--grace", type=float, default=5.0, show_default=True,
              help="Seconds between TERM and KILL when stopping an attempt's group.")
@click.option("--isolation", type=click.Choice(["auto", "uid", "userns", "none"]),
              default="auto", show_default=True,
              help="How attempts are kept from each other and from the worker: uid (root "
                   "with CAP_SETUID/SETGID/KILL/CHOWN/DAC_OVERRIDE/FOWNER: each attempt runs "
                   "as its own uid), userns (a user, mount and PID namespace per attempt), "
                   "none; auto picks the first that works here.")
@click.option("--attempt-uids", default="2000000000-2000065535",
              show_default=True, help="Uids handed to attempts in uid mode, FIRST-LAST.")
@click.option("--attempt-root", default=None, type=str,
              help="Directory holding each isolated attempt's private HOME and bundle copy "
                   "[default: $TMPDIR/ql3-worker-<uid>/attempts].")
@click.option("--allow-shared-uid", is_flag=True, default=False,
              help="Allow --concurrency > 1 without isolation (attempts could read each "
                   "other's environment); logged at start.")
@click.option("--log-stream-rate", type=int, default=64 * 1024, show_default=True,
              help="Bytes per second of each attempt's output streamed live to control; "
                   "output past it (and past the burst) is not streamed live, recorded as a "
                   "gap: the uploaded log still holds it, up to the cap.")
@click.option("--log-stream-burst", type=int, default=1024 * 1024, show_default=True,
              help="Bytes of each attempt's output streamed live at once before the rate "
                   "applies.")
@click.option("--log-upload-bound", type=float, default=900.0, show_default=True,
              help="Seconds an attempt whose command has ended keeps its lease while the "
                   "object store (S3) refuses its log; past it the attempt completes with "
                   "its exit code's outcome and reason log_unavailable (its live log stays "
                   "readable as a partial log).")
def run(control_url: str, concurrency: int, labels: str, name: str | None,
        token_file: str | None, spool_dir: str | None, drain_budget: float,
        grace: float, isolation: str, attempt_uids: str, attempt_root: str | None,
        allow_shared_uid: bool, log_stream_rate: int, log_stream_burst: int,
        log_upload_bound: float) -> int:
    """Register with control, claim and run attempts until SIGTERM/SIGINT, then drain.

    Token: env QL3_WORKER_TOKEN or --token-file; it is removed from this process's
    environment and the process is made non-dumpable, so tasks cannot read it from /proc.
    A token control refuses (401: revoked or unknown) stops the worker: running attempts are
    stopped, exit 1 — unless the token came from --token-file and the file now holds another
    token (rotated): the worker then switches to it and goes on.

    A task without a working directory runs in this worker user's HOME (/ when HOME is
    unset or not a directory), never in the worker's own working directory; with isolation,
    in the attempt's own private directory, which is also its HOME.

    Isolation (docs/protocols.md §4.8): without uid or userns isolation, --concurrency above
    1 is refused (exit 2) unless --allow-shared-uid.

    At start, spool files left by a killed worker (attempts whose lock no process holds) are
    removed, unless another worker is using the same spool directory.
    """
    from qinglong.worker.credentials import load_token, make_undumpable, read_token_file

    token = load_token(token_file)  # removes QL3_WORKER_TOKEN from os.environ
    make_undumpable()
    urls = _control_urls(control_url)
    if not 1 <= concurrency <= MAX_CLAIM:
        raise ValidationError("--concurrency", f"must be 1–{MAX_CLAIM}")
    if drain_budget < 0 or grace < 0:
        raise ValidationError("--drain-budget", "durations must be ≥ 0")
    if log_upload_bound < 0:
        raise ValidationError("--log-upload-bound", "must be ≥ 0 seconds")
    if log_stream_rate < 1 or log_stream_burst < 1:
        raise ValidationError("--log-stream-rate", "rate and burst must be ≥ 1 byte")
    declared = _labels(labels)
    worker_name = name or socket.gethostname().split(".")[0]
    uid_range = _uid_range(attempt_uids)

    from qinglong.worker.attempt import RunnerConfig
    from qinglong.worker.bundles import BundleStore
    from qinglong.worker.client import ControlClient
    from qinglong.worker.errors import SpoolError
    from qinglong.worker.isolation import IsolationError, adopt_attempt_root, choose
    from qinglong.worker.loop import WorkerConfig, WorkerLoop
    from qinglong.worker.spool import adopt_spool_dir
    from qinglong.worker.spool_dir import prepare_spool_dir, remove_stale_checkouts

    try:
        spool = prepare_spool_dir(Path(spool_dir) if spool_dir else _default_spool_dir())
        _marker_fd, stale = adopt_spool_dir(spool)  # held (open) until the process ends
    except SpoolError as exc:
        raise ValidationError("--spool-dir", str(exc)) from None
    try:
        isolated = choose(isolation, root=Path(attempt_root) if attempt_root
                          else _default_attempt_root(), spool_dir=spool, uids=uid_range,
                          grace_s=grace, secrets=() if token_file is None
                          else (Path(token_file).absolute(),))
    except IsolationError as exc:
        raise ValidationError("--isolation", str(exc)) from None
    if isolated.mode == "none" and concurrency > 1 and not allow_shared_uid:
        raise ValidationError("--concurrency", SHARED_UID_REFUSAL)
    # every line carries the worker's name: several workers' logs are often read together
    tag = worker_name.replace("%", "%%")
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s ql3-worker {tag} "
                        "%(levelname)s %(message)s")
    if stale is None:
        logging.getLogger("qinglong.worker").info(
            "spool directory %s is used by another worker: stale files left alone", spool)
    else:
        logging.getLogger("qinglong.worker").info(
            "removed %d stale spool file(s) left by killed workers from %s", stale, spool)
    if isolated.work_dir is not None:
        try:
            alone = adopt_attempt_root(isolated.work_dir)
        except IsolationError as exc:
            raise ValidationError("--attempt-root", str(exc)) from None
        if alone and stale is not None:
            remove_stale_checkouts(spool, isolated.work_dir)
    worker_log = logging.getLogger("qinglong.worker")
    if isolated.mode == "none" and concurrency > 1:
        worker_log.warning(
            "isolation none with --concurrency %d (--allow-shared-uid): attempts run as one "
            "user and can read each other's environment, memory and files", concurrency)
    else:
        worker_log.info("isolation %s", isolated.mode)
    # httpx logs every request at INFO, presigned URLs (a signature valid for minutes)
    # included: never in our log
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        bundles = BundleStore(spool, work_dir=isolated.work_dir)
    except SpoolError as exc:
        raise ValidationError("--spool-dir", str(exc)) from None
    config = WorkerConfig(name=worker_name, labels=declared, concurrency=concurrency,
                          drain_budget_s=drain_budget, control_url=",".join(urls),
                          runner=RunnerConfig(spool_dir=spool, grace_s=grace,
                                              bundles=bundles, isolation=isolated,
                                              upload_bound_s=log_upload_bound))
    path = token_file
    client = ControlClient(urls, token, reload_token=(
        None if path is None else lambda: read_token_file(path)))
    from dataclasses import replace

    from qinglong.worker.live_log import LiveLogSender, StreamConfig

    live = LiveLogSender(client, StreamConfig(rate_bytes_s=log_stream_rate,
                                              burst_bytes=log_stream_burst))
    config = replace(config, runner=replace(config.runner, live=live))
    loop = WorkerLoop(client, config)

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        loop.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return loop.run()
    finally:
        live.close()
        client.close()
        config.runner.uploader.close()
