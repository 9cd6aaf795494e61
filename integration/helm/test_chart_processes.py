"""The chart's containers, run as their pods would run them (issue 14 item 1): the command
lines and environments are taken from the rendered manifests, never restated here, and each
container runs in bubblewrap as the pod's uid with no capabilities, a read-only root, only the
pod's volumes writable and root's files hidden (``sandbox.py``). Real PostgreSQL (a database,
a schema owner and a runtime role of this test), moto's S3 server over HTTP, real ``ql3``.

The scenario is an install: the migration Job's steps in order (migrate as the owner, import
the admin and pool tokens from their Secrets, readiness), then again (an upgrade: nothing
changes); a control replica that answers /readyz as the runtime login; a worker
of the pool; the chart's helm test pod, which runs one task end to end; a task showing what a
task may touch inside the worker's pod (not the pool token: it is in no file and not in the
task's environment); a rotation of the pool's token Secret while a task runs, as `helm
upgrade` does it (the migration Job's token step with the new Secret and the chart's
--overlap, then the pool's pods rolled): the old worker keeps its token and its task
completes, a worker started as the rolled pod (the new token in its environment) registers
and runs a task, the old worker drains on SIGTERM, the old token still valid; once the
overlap ends (the test ends it on purpose, by the database's clock) the old token is
refused; SIGTERM to control and the new worker, which drain and exit 0.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from chart_render import Rendered, containers, render
from cluster_kit import free_port, pg_url, wait_for
from s3_services import CREDS, new_bucket
from sandbox import Image, Pod, Sandboxed, proc_uid

from qinglong.control.retention.objects import make_client

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

CONTROL_IMAGE = Image(workdir="/")  # Dockerfile: no WORKDIR in the control stage
WORKER_IMAGE = Image(workdir="/var/lib/qinglong/work")  # Dockerfile: WORKDIR of the worker
SECRET_NAMES = {"runtime": "ql3-db-runtime", "owner": "ql3-db-owner", "s3": "ql3-s3",
                "admin": "ql3-admin", "pool": "ql3-pool-default"}


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url("postgres", "postgres"), autocommit=True, connect_timeout=10)


@dataclass
class Install:
    """What an operator prepares before `helm install`: a database owned by a schema owner
    (no CREATEROLE), the runtime role and the replicas' login in it, the Secrets, a
    bucket."""

    database: str
    owner: str
    runtime_role: str
    login: str
    bucket: str
    s3_endpoint: str
    admin_token: str
    pool_token: str

    @property
    def secrets(self) -> dict[tuple[str, str], str]:
        return {
            (SECRET_NAMES["runtime"], "url"): pg_url(self.login, self.database),
            (SECRET_NAMES["owner"], "url"): pg_url(self.owner, self.database),
            (SECRET_NAMES["s3"], "AWS_ACCESS_KEY_ID"): CREDS["aws_access_key_id"],
            (SECRET_NAMES["s3"], "AWS_SECRET_ACCESS_KEY"): CREDS["aws_secret_access_key"],
            (SECRET_NAMES["admin"], "token"): self.admin_token,
            (SECRET_NAMES["pool"], "token"): self.pool_token,
        }

    def values(self, port: int) -> dict[str, Any]:
        """The values of this install. The control port doubles as the Service port: on
        this machine every pod shares the loopback network."""
        return {
            "database": {"runtimeRole": self.runtime_role,
                         "runtime": {"existingSecret": SECRET_NAMES["runtime"]},
                         "migration": {"existingSecret": SECRET_NAMES["owner"]}},
            "logs": {"bucket": self.bucket, "s3Endpoint": self.s3_endpoint,
                     "region": "us-east-1",
                     "credentials": {"existingSecret": SECRET_NAMES["s3"]}},
            "bootstrapAdmin": {"existingSecret": SECRET_NAMES["admin"]},
            "control": {"port": port, "service": {"port": port}, "replicas": 1,
                        "drainSeconds": 5},
            "worker": {"concurrency": 1, "drainBudgetSeconds": 10, "graceSeconds": 2,
                       "pools": [{"name": "default",
                                  "token": {"existingSecret": SECRET_NAMES["pool"]}}]},
            "tests": {"timeoutSeconds": 90},
        }

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url("postgres", self.database), autocommit=True,
                             connect_timeout=10) as conn:
            return conn.execute(query).fetchall()


@pytest.fixture
def install(helm_moto: str, bwrap_ready: None) -> Iterator[Install]:
    suffix = secrets.token_hex(4)
    bucket = new_bucket(make_client(helm_moto, timeout_s=5, **CREDS), versioned=True)
    it = Install(f"ql3h_{suffix}", f"ql3h_owner_{suffix}", f"ql3h_rt_{suffix}",
                 f"ql3h_login_{suffix}", bucket, helm_moto,
                 "ql3_" + secrets.token_urlsafe(32), "ql3_" + secrets.token_urlsafe(32))
    with _admin() as conn:  # the DBA's part (helm/qinglong/README.md "Before installing")
        conn.execute(f'CREATE ROLE "{it.owner}" LOGIN')
        conn.execute(f'CREATE DATABASE "{it.database}" OWNER "{it.owner}"')
        conn.execute(f'CREATE ROLE "{it.runtime_role}" NOLOGIN')
        conn.execute(f'CREATE ROLE "{it.login}" LOGIN IN ROLE "{it.runtime_role}"')
    try:
        yield it
    finally:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{it.database}" WITH (FORCE)')
            for role in (it.login, it.runtime_role, it.owner):
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _pod(rendered: Rendered, kind: str, name: str, install: Install,
         hosts: list[str]) -> Pod:
    doc = rendered.one(kind, name)
    spec = doc["spec"] if kind == "Pod" else doc["spec"]["template"]["spec"]
    config_maps = {c["metadata"]["name"]: c["data"] for c in rendered.kinds("ConfigMap")}
    return Pod(spec, f"{name}-{secrets.token_hex(3)}", install.secrets, hosts, config_maps)


def _run_job(rendered: Rendered, install: Install, hosts: list[str]) -> list[str]:
    """Every container of the migration Job in pod order; each must exit 0 and print no
    token. Returns the steps' names."""
    pod = _pod(rendered, "Job", "ql3-qinglong-migrate", install, hosts)
    try:
        names = []
        for step in containers(pod.spec):
            container = copy.deepcopy(step)
            out = pod.run(container, CONTROL_IMAGE)
            assert out.returncode == 0, (container["name"], out.stderr)
            for token in (install.admin_token, install.pool_token):
                assert token not in out.stdout + out.stderr
            names.append(container["name"])
        return names
    finally:
        pod.close()


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


PROBE = """echo "uid=$(id -u)"
echo "root-fs=$(touch /opt/ql3-probe 2>&1)"
echo "root-home=$(ls -A /root | tr '\\n' ' ')"
echo "shadow=$(cat /etc/shadow 2>&1)"
touch "$HOME/written" && echo "home=$HOME writable"
echo "token-vars=$(env | grep -c QL3_WORKER_TOKEN)"
echo "secrets-dir=$(test -e /run/secrets/qinglong && echo present || echo absent)"
exit 0
"""


def _api(port: int, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{port}",
                        headers={"Authorization": f"Bearer {token}"}, timeout=10)


def _start_task(api: httpx.Client, name: str, shell: str) -> str:
    """Create task ``name`` and run it now; the run's id."""
    made = api.post("/v1/tasks", json={"name": name, "shell": shell})
    assert made.status_code == 201, made.text
    return str(api.post(f"/v1/tasks/{name}/run").json()["id"])


def _finished(api: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    detail = wait_for(lambda: (d := api.get(f"/v1/runs/{run_id}").json())["status"]
                      in ("succeeded", "failed", "timed_out", "lost") and d, timeout, 0.5)
    assert detail, f"run {run_id} did not finish"
    return dict(detail)


def _run_probe_task(port: int, token: str) -> str:
    """A task whose output says what it may touch inside the worker's pod; its log."""
    with _api(port, token) as api:
        detail = _finished(api, _start_task(api, "sandbox-probe", PROBE))
        assert detail["status"] == "succeeded", detail
        log = api.get(f"/v1/attempts/{detail['attempts'][-1]['id']}/log")
        assert log.status_code == 200, log.text
        return log.text


def _roll_the_pool_onto_a_rotated_token(rendered: Rendered, install: Install,
                                        hosts: list[str], old_pod: Pod,
                                        old_worker: Sandboxed, port: int, log_dir: Path,
                                        pods: list[Pod], running: list[Sandboxed]
                                        ) -> Sandboxed:
    """``helm upgrade`` after the pool's Secret got a new token: the migration Job records
    it and keeps the old one valid for the overlap; the pool's pods roll (the pod
    annotation follows the Secret). The old worker, its token in its environment, keeps
    working: a task running across the rotation completes on it. A new pod, started as the
    Deployment starts one (the new token from the Secret in its environment), registers and
    runs a task; the old pod drains on SIGTERM and exits 0, its token still valid; once the
    overlap has ended the old token is refused. The overlap is the chart's (an hour): the
    test never races a short real window, it ends the overlap on purpose (``revoked_at``
    moved to the database's now). Returns the new worker, still running (its pod added to ``pods``,
itself to ``running``)."""
    old = install.pool_token
    (job,) = rendered.kinds("Job")
    (step,) = [c for c in containers(job["spec"]["template"]["spec"])
               if c["name"] == "token-pool-default"]
    assert "--overlap=3600" in step["args"]  # the chart's default
    with _api(port, install.admin_token) as api:
        old_run = _start_task(api, "across-rotation", "sleep 10; echo rotated-marker")
        assert wait_for(lambda: api.get(f"/v1/runs/{old_run}").json()["status"]
                        == "running", 30, 0.2), old_worker.text()
        pid = old_worker.main_pid()

        install.pool_token = "ql3_" + secrets.token_urlsafe(32)  # the rotated Secret
        _run_job(rendered, install, hosts)
        # the old token's end by the database's clock (the token check's own): the overlap
        ((left,),) = install.sql("SELECT extract(epoch FROM revoked_at - now()) FROM api_tokens"
                                 " WHERE name = 'pool-default' AND revoked_at IS NOT NULL")
        assert 3500 < float(left) <= 3600, f"the old pool token ends in {left} s, not an hour"

        # the rolled pod: rendered again from the same values, its env from the new Secret
        new_pod = _pod(render(install.values(port)), "Deployment",
                       "ql3-qinglong-worker-default", install, hosts)
        pods.append(new_pod)
        (container,) = new_pod.spec["containers"]
        assert new_pod.env(container, WORKER_IMAGE)["QL3_WORKER_TOKEN"] == install.pool_token
        new_worker = new_pod.start(container, WORKER_IMAGE, log_dir / "worker-new.log")
        running.append(new_worker)
        assert wait_for(lambda: "registered as" in new_worker.text()
                        or new_worker.popen.poll() is not None, 30), new_worker.text()
        assert new_worker.popen.poll() is None, new_worker.text()

        detail = _finished(api, old_run)
        assert detail["status"] == "succeeded", (detail, old_worker.text())
        (attempt,) = detail["attempts"]
        assert attempt["worker_name"] == old_pod.name
        assert "rotated-marker" in api.get(f"/v1/attempts/{attempt['id']}/log").text
        assert old_worker.popen.poll() is None and old_worker.main_pid() == pid

        # the rollout stops the old pod: it drains with its old token, still valid
        assert old_worker.stop(timeout=40) == 0, old_worker.text()
        new_run = _finished(api, _start_task(api, "after-rotation", "echo rolled-marker"))
        assert new_run["status"] == "succeeded", (new_run, new_worker.text())
        (attempt,) = new_run["attempts"]
        assert attempt["worker_name"] == new_pod.name

        # the overlap ends (on purpose): the old token is refused, the new worker goes on
        def refused() -> bool:
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/worker/claim", json={},
                                headers={"Authorization": f"Bearer {old}"}, timeout=10)
            return answer.status_code == 401
        assert not refused(), "the old token was refused within its overlap"
        install.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'pool-default'"
                    " AND revoked_at > now() RETURNING id")
        assert wait_for(refused, 15, 0.5), "the old token outlived its overlap"
    for text in (old_worker.text(), new_worker.text()):
        assert "refused (401)" not in text, text
        assert old not in text and install.pool_token not in text
    assert new_worker.popen.poll() is None, new_worker.text()
    return new_worker


def test_the_charts_containers_install_serve_and_run_a_task_in_their_sandboxes(
        install: Install, tmp_path: Path) -> None:
    port = free_port()
    rendered = render(install.values(port))
    control_service = "ql3-qinglong-control"
    hosts = [control_service]

    # the migration Job, as the pre-install hook runs it, then again as a pre-upgrade hook
    steps = _run_job(rendered, install, hosts)
    assert steps == ["migrate", "token-bootstrap-admin", "token-pool-default", "readiness"]
    tokens = install.sql("SELECT name, scope, id::text FROM api_tokens"
                         " WHERE revoked_at IS NULL ORDER BY name")
    assert [(n, s) for n, s, _ in tokens] == [("bootstrap-admin", "admin"),
                                             ("pool-default", "worker")]
    assert _run_job(rendered, install, hosts) == steps
    assert install.sql("SELECT name, scope, id::text FROM api_tokens ORDER BY name") == tokens

    control_pod = _pod(rendered, "Deployment", control_service, install, hosts)
    worker_pod = _pod(rendered, "Deployment", "ql3-qinglong-worker-default", install, hosts)
    test_pod = _pod(rendered, "Pod", "ql3-qinglong-test", install, hosts)
    pods = [control_pod, worker_pod, test_pod]
    running: list[Sandboxed] = []
    try:
        (control_container,) = control_pod.spec["containers"]
        control = control_pod.start(control_container, CONTROL_IMAGE, tmp_path / "control.log")
        running.append(control)
        assert wait_for(lambda: _ready(port) or control.popen.poll() is not None, 60), \
            control.text()
        assert _ready(port), control.text()
        assert proc_uid(control.main_pid() or 0) == control_pod.uid == 10001

        (worker_container,) = worker_pod.spec["containers"]
        worker = worker_pod.start(worker_container, WORKER_IMAGE, tmp_path / "worker.log")
        running.append(worker)
        assert wait_for(lambda: worker.main_pid() is not None, 10), worker.text()

        # `helm test`: the chart's own test pod, its script from the chart's ConfigMap
        (test_container,) = test_pod.spec["containers"]
        result = test_pod.run(test_container, CONTROL_IMAGE, timeout=150)
        assert result.returncode == 0, (result.stdout, result.stderr, worker.text())
        assert "succeeded and its log holds the marker" in result.stdout
        assert install.admin_token not in result.stdout + result.stderr

        # what a task may touch in the worker's pod: it runs as 10001, the root filesystem
        # is read-only, root's home is empty, /etc/shadow unreadable, HOME (an emptyDir)
        # writable, and the pool token is not in its environment, nor mounted as a file
        seen = dict(line.split("=", 1) for line in
                    _run_probe_task(port, install.admin_token).splitlines() if "=" in line)
        assert seen["uid"] == "10001"
        assert "Read-only file system" in seen["root-fs"]
        # only the interpreter's directory this machine binds in (a pyenv under /root)
        assert set(seen["root-home"].split()) <= {".pyenv"}, seen
        assert "Permission denied" in seen["shadow"]
        assert seen["home"] == "/var/lib/qinglong/work writable"
        assert seen["token-vars"] == "0"
        assert seen["secrets-dir"] == "absent"

        worker = _roll_the_pool_onto_a_rotated_token(
            rendered, install, hosts, worker_pod, worker, port, tmp_path, pods, running)

        # SIGTERM, as the kubelet sends it: both drain and exit 0
        assert worker.stop(timeout=40) == 0, worker.text()
        assert control.stop(timeout=40) == 0, control.text()
        running.clear()
    finally:
        for proc in running:
            proc.stop(timeout=20)
        for pod in pods:
            pod.close()
