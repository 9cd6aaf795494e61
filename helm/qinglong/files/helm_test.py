"""The chart's `helm test`: control answers /readyz, and one task runs end to end.

Run by the test Pod (templates/tests/test-pod.yaml) with the control image's python3, stdlib
only. Environment: QL3_CONTROL_URL (the Service's base URL), QL3_TEST_TOKEN (an admin token:
it creates and removes the task), QL3_TEST_TIMEOUT_S (seconds the run may take).

Steps: GET /readyz must answer 200; POST /v1/tasks creates `helm-test-<random>` (manual only,
one attempt) whose command prints a random marker; POST /v1/tasks/<name>/run queues a run;
GET /v1/runs/<id> is polled until the run is terminal, which must be `succeeded`; the
attempt's log (GET /v1/attempts/<id>/log) must hold the marker; the task is deleted in every
case. Exit 0 on success, 1 with one line naming the failed step otherwise. The token is never
printed.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from typing import Any

TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "lost"}


class StepFailedError(Exception):
    """One step of the test failed; the message names it (never the token)."""


def call(method: str, path: str, body: dict[str, Any] | None = None,
         *, auth: bool = True) -> tuple[int, bytes]:
    """One HTTP request to control: (status, body bytes). Raises StepFailedError when control
    cannot be reached."""
    base = os.environ["QL3_CONTROL_URL"].rstrip("/")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)  # noqa: S310
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if auth:
        request.add_header("Authorization", "Bearer " + os.environ["QL3_TEST_TOKEN"])
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise StepFailedError(f"{method} {path}: control unreachable ({exc})") from None


def expect(step: str, got: tuple[int, bytes], status: int) -> Any:
    """The JSON body of ``got`` when its status is ``status``; StepFailedError otherwise."""
    if got[0] != status:
        raise StepFailedError(f"{step}: HTTP {got[0]}: {got[1][:300].decode(errors='replace')}")
    return json.loads(got[1]) if got[1] else None


def run_one_task(timeout_s: float) -> str:
    """Create, run and check one task; returns the run's id. The task is always deleted."""
    name = "helm-test-" + secrets.token_hex(4)
    marker = "ql3-helm-test-" + secrets.token_hex(8)
    expect("create task", call("POST", "/v1/tasks", {
        "name": name, "argv": ["/bin/sh", "-c", 'echo "$0"', marker], "max_attempts": 1,
        "timeout_s": 60, "log_retention_s": 86_400}), 201)
    try:
        run = expect("run task", call("POST", f"/v1/tasks/{name}/run"), 201)
        deadline = time.monotonic() + timeout_s
        while True:
            detail = expect("read run", call("GET", f"/v1/runs/{run['id']}"), 200)
            if detail["status"] in TERMINAL:
                break
            if time.monotonic() > deadline:
                raise StepFailedError(f"run {run['id']} still {detail['status']} after "
                                 f"{timeout_s:.0f} s (is a worker running?)")
            time.sleep(1)
        if detail["status"] != "succeeded":
            raise StepFailedError(f"run {run['id']} ended {detail['status']}")
        attempt = detail["attempts"][-1]["id"]
        status, log = call("GET", f"/v1/attempts/{attempt}/log")
        if status != 200 or marker.encode() not in log:
            raise StepFailedError(f"attempt {attempt}: log HTTP {status} without the marker")
        return str(run["id"])
    finally:
        call("DELETE", f"/v1/tasks/{name}")


def main() -> int:
    """The test; the exit status of the Pod."""
    try:
        ready = expect("readyz", call("GET", "/readyz", auth=False), 200)
        print(f"readyz: ready, degraded {ready.get('degraded', [])}", flush=True)
        run_id = run_one_task(float(os.environ.get("QL3_TEST_TIMEOUT_S", "180")))
    except StepFailedError as exc:
        print(f"helm test failed: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"run {run_id} succeeded and its log holds the marker", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
