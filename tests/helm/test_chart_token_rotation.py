"""Seamless rotation of a pool's token (docs/operations.md §3): the worker pods read the
token from the pool's Secret mounted as a file — the kubelet updates a mounted Secret in
place, an environment variable never — and the migration Job gives a replaced token
``worker.tokenRotationOverlapSeconds`` (3600) more seconds of validity, so the running
workers switch to the new token (at their next 401) instead of dying."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, Rendered, containers, load_values, pod_specs, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")
MOUNT = "/run/secrets/qinglong/token"


def _flags(args: list[str]) -> dict[str, str]:
    return {a.partition("=")[0]: a.partition("=")[2] for a in args if a.startswith("--")}


def _render(**worker: Any) -> Rendered:
    values = load_values(MINIMAL)
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin"}
    values["worker"] = {**values.get("worker", {}), **worker}
    return render(values)


def _workers(rendered: Rendered) -> list[dict[str, Any]]:
    return [d for d in rendered.kinds("Deployment")
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]


def _pool_steps(rendered: Rendered) -> dict[str, dict[str, Any]]:
    (job,) = rendered.kinds("Job")
    return {c["name"]: c for c in containers(job["spec"]["template"]["spec"])}


def test_worker_pods_read_the_pool_token_from_its_mounted_secret(
        ci_rendered: Rendered) -> None:
    """No QL3_WORKER_TOKEN (an env var never changes in a running pod): ``--token-file``
    names the key's file under the Secret volume's ``..data`` directory (the kubelet swaps
    that symlink at an update; the file itself is a regular one, which the worker's
    O_NOFOLLOW open needs), mounted read-only from the pool's own Secret and key. The pod's
    fsGroup is its runAsGroup: the kubelet makes the file root:fsGroup 0440, which is what
    the worker accepts besides a 0600 file of its own."""
    rendered = ci_rendered
    (job,) = rendered.kinds("Job")
    job_volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    workers = _workers(rendered)
    assert workers
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        names = {e["name"] for e in container.get("env", [])}
        assert "QL3_WORKER_TOKEN" not in names
        (volume,) = [v for v in spec["volumes"] if v["name"] == "token"]
        secret = volume["secret"]
        (item,) = secret["items"]
        assert item["key"] == item["path"]
        assert secret["defaultMode"] == 0o440
        assert _flags(container["args"])["--token-file"] == f"{MOUNT}/..data/{item['path']}"
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "token"]
        assert mount == {"name": "token", "mountPath": MOUNT, "readOnly": True}
        # the very Secret key the migration Job imports for this pool
        pool = deployment["metadata"]["labels"]["qinglong.io/pool"]
        imported = job_volumes[f"pool-{pool}-token"]["secret"]
        assert secret["secretName"] == imported["secretName"]
        assert secret["items"] == imported["items"]
        context = spec["securityContext"]
        assert context["fsGroup"] == context["runAsGroup"]


def test_the_migration_job_gives_a_replaced_pool_token_the_overlap() -> None:
    """Every pool's import carries ``--overlap`` (3600 by default, the value's or the
    pool's own); the bootstrap admin token's does not (a rotated admin Secret revokes the
    old admin token at once)."""
    steps = _pool_steps(_render())
    assert _flags(steps["token-pool-default"]["args"])["--overlap"] == "3600"
    assert "--overlap" not in _flags(steps["token-bootstrap-admin"]["args"])
    pools = [{"name": "a", "token": {"existingSecret": "ql3-pool-a"}},
             {"name": "b", "token": {"existingSecret": "ql3-pool-b"},
              "tokenRotationOverlapSeconds": 0}]
    steps = _pool_steps(_render(tokenRotationOverlapSeconds=120, pools=pools))
    assert _flags(steps["token-pool-a"]["args"])["--overlap"] == "120"
    assert _flags(steps["token-pool-b"]["args"])["--overlap"] == "0"


def test_only_the_workers_mount_a_pool_token() -> None:
    """The pool token Secret reaches the worker pods and the migration Job, nothing else
    (control, the helm test)."""
    rendered = _render()
    for owner, spec in pod_specs(rendered.docs):
        kind = owner["kind"]
        secrets = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        component = owner["metadata"]["labels"].get("app.kubernetes.io/component")
        if component not in ("worker", "migrate"):
            assert not any(s.startswith("ql3-pool") for s in secrets), (kind, secrets)
