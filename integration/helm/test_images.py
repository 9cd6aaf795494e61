"""The images the Dockerfile builds, built here (scripts/build_images.sh: buildah over a
Debian base made by debootstrap, no registry) and run from their own root file systems as
the chart's pods run them (``image_sandbox``: ``buildah mount`` + bubblewrap, since
``podman run`` is refused on this machine). Real PostgreSQL (a database and roles of this
test), moto's S3 server over HTTP.

The scenario: the migration Job's steps from the control image; control from its image
answering /readyz; a worker from its image; the chart's `helm test` pod from the control
image (one task end to end); a task on the image's worker that reports its interpreters
(bash, python3, node), its uid and every path it may write; the same writable-path check in
a control container. Both images run as uid 10001 and, from their files, give that user
nothing outside the pod's volumes.

Skipped, with the reason, only where buildah cannot work (not root, buildah or debootstrap
missing); a failing build fails.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from chart_render import Rendered, containers, render
from cluster_kit import free_port, wait_for
from image_sandbox import Built, ImagePod
from sandbox import proc_uid
from test_chart_processes import Install, install  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.image]

ROOT = Path(__file__).resolve().parents[2]
CONTROL_SERVICE = "ql3-qinglong-control"
WORKER_DEPLOYMENT = "ql3-qinglong-worker-default"


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """{"control": name, "worker": name} built by scripts/build_images.sh (its caches make a
    rerun quick); the build time is printed, never asserted (bench/README.md has it)."""
    why = [f"{tool} not installed (apt-get install -y {tool}; scripts/test.sh does)"
           for tool in ("buildah", "debootstrap", "bwrap") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        why.append("buildah's chroot builds and the sandbox need root")
    if not why:
        info = subprocess.run(["buildah", "info"], capture_output=True, text=True, check=False)
        if info.returncode != 0:
            why.append(f"buildah cannot work here: {info.stderr.strip()[-500:]}")
    if why:
        pytest.skip("; ".join(why))
    started = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_images.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"build_images.sh: {time.monotonic() - started:.1f} s")
    names = done.stdout.split()
    return {target: next(n for n in names if f"qinglong-{target}:" in n)
            for target in ("control", "worker")}


@pytest.fixture
def mounted(images: dict[str, str]) -> Iterator[dict[str, Built]]:
    built: dict[str, Built] = {}
    try:
        for target, name in images.items():
            built[target] = Built(name)
        yield built
    finally:
        for one in built.values():
            one.close()


def _pod(rendered: Rendered, kind: str, name: str, install: Install, built: Built,  # noqa: F811
         hosts: list[str]) -> ImagePod:
    doc = rendered.one(kind, name)
    spec = doc["spec"] if kind == "Pod" else doc["spec"]["template"]["spec"]
    config_maps = {c["metadata"]["name"]: c["data"] for c in rendered.kinds("ConfigMap")}
    return ImagePod(spec, f"{name}-{os.urandom(3).hex()}", install.secrets, hosts, config_maps,
                    built=built)


WRITABLE = ("find / \\( -path /proc -o -path /dev \\) -prune -o -writable -print 2>/dev/null"
            " | sed 's/^/writable=/'")
PROBE = f"""echo "uid=$(id -u) gid=$(id -g)"
echo "bash=$(bash -c 'echo "$BASH_VERSION"')"
echo "python3=$(python3 -c 'print(6 * 7)')"
echo "node=$(node -e 'console.log(6 * 7)')"
{WRITABLE}
"""


def _writable_outside(lines: list[str], mounts: list[dict[str, Any]]) -> list[str]:
    """Paths a probe found writable that are not in one of the pod's writable volumes."""
    volumes = [m["mountPath"] for m in mounts if not m.get("readOnly")]
    found = [line.split("=", 1)[1] for line in lines if line.startswith("writable=")]
    assert found, "the probe listed nothing (its own volumes are writable)"
    return [p for p in found if not any(p == v or p.startswith(v + "/") for v in volumes)]


def _owned_by(root: Path, uid: int) -> list[str]:
    """Files and directories in an image's file system owned by ``uid`` or writable by
    everyone (sticky directories such as /tmp aside; device nodes are the runtime's)."""
    done = subprocess.run(["find", str(root), "-xdev", "(", "-type", "f", "-o", "-type", "d",
                           ")", "(", "-uid", str(uid), "-o", "-perm", "-0002", "!", "-perm",
                           "-1000", ")", "-print"],
                          capture_output=True, text=True, check=True)
    return [line[len(str(root)):] for line in done.stdout.splitlines()]


def test_the_built_images_install_serve_and_run_a_task_as_the_chart_runs_them(
        mounted: dict[str, Built], install: Install, tmp_path: Path) -> None:  # noqa: F811
    control_image, worker_image = mounted["control"], mounted["worker"]
    for built in (control_image, worker_image):
        assert built.config.get("User") == "10001:10001", built.config
        assert _owned_by(built.root, 10001) == [], built.name
    port = free_port()
    rendered = render(install.values(port))
    hosts = [CONTROL_SERVICE]

    job = _pod(rendered, "Job", "ql3-qinglong-migrate", install, control_image, hosts)
    control_pod = _pod(rendered, "Deployment", CONTROL_SERVICE, install, control_image, hosts)
    worker_pod = _pod(rendered, "Deployment", WORKER_DEPLOYMENT, install, worker_image, hosts)
    test_pod = _pod(rendered, "Pod", "ql3-qinglong-test", install, control_image, hosts)
    pods = [job, control_pod, worker_pod, test_pod]
    running = []
    try:
        for step in containers(job.spec):
            out = job.run(step, control_image.image)
            assert out.returncode == 0, (step["name"], out.stdout, out.stderr)

        (control_container,) = control_pod.spec["containers"]
        control = control_pod.start(control_container, control_image.image,
                                    tmp_path / "control.log")
        running.append(control)

        def ready() -> bool:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            except httpx.HTTPError:
                return control.popen.poll() is not None
            return answer.status_code == 200
        assert wait_for(ready, 60) and control.popen.poll() is None, control.text()
        assert proc_uid(control.main_pid() or 0) == 10001

        (worker_container,) = worker_pod.spec["containers"]
        worker = worker_pod.start(worker_container, worker_image.image,
                                  tmp_path / "worker.log")
        running.append(worker)
        assert wait_for(lambda: worker.main_pid() is not None, 20), worker.text()
        assert proc_uid(worker.main_pid() or 0) == 10001

        # `helm test`: the chart's test pod, from the control image
        (test_container,) = test_pod.spec["containers"]
        result = test_pod.run(test_container, control_image.image, timeout=150)
        assert result.returncode == 0, (result.stdout, result.stderr, worker.text())
        assert "succeeded and its log holds the marker" in result.stdout

        # one task on the image's worker: its interpreters, its user, what it may write
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, headers={
                "Authorization": f"Bearer {install.admin_token}"}) as api:
            made = api.post("/v1/tasks", json={"name": "镜像探针", "shell": PROBE})
            assert made.status_code == 201, made.text
            run_id = api.post("/v1/tasks/镜像探针/run").json()["id"]
            detail = wait_for(lambda: (d := api.get(f"/v1/runs/{run_id}").json())["status"]
                              in ("succeeded", "failed", "timed_out", "lost") and d, 60, 0.5)
            assert detail and detail["status"] == "succeeded", (detail, worker.text())
            log = api.get(f"/v1/attempts/{detail['attempts'][-1]['id']}/log")
            assert log.status_code == 200, log.text
        lines = log.text.splitlines()
        assert "uid=10001 gid=10001" in lines, log.text
        assert any(line.startswith("bash=5.") for line in lines), log.text
        assert "python3=42" in lines and "node=42" in lines, log.text
        assert _writable_outside(lines, worker_container["volumeMounts"]) == []

        # the same check in a control container (its Deployment's volumes, a shell command)
        probe = copy.deepcopy(control_container)
        probe.update(command=["sh", "-c", 'echo "uid=$(id -u)"; ' + WRITABLE], args=[])
        seen = control_pod.run(probe, control_image.image)
        assert seen.returncode == 0, seen.stderr
        assert "uid=10001" in seen.stdout.splitlines(), seen.stdout
        assert _writable_outside(seen.stdout.splitlines(), probe["volumeMounts"]) == []

        assert worker.stop(timeout=40) == 0, worker.text()
        assert control.stop(timeout=40) == 0, control.text()
        running.clear()
    finally:
        for proc in running:
            proc.stop(timeout=20)
        for pod in pods:
            pod.close()
