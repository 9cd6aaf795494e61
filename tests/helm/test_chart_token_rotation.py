"""Seamless rotation of a pool's token (docs/operations.md §3) without exposing it to
tasks: the worker pods get the token from the pool's Secret as ``QL3_WORKER_TOKEN`` (which
the worker removes from its environment and guards with PR_SET_DUMPABLE 0), never as a
mounted file a task could read; the migration Job gives a replaced token
``worker.tokenRotationOverlapSeconds`` (3600) more seconds of validity, while the pods roll
to the new token."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, Rendered, containers, load_values, pod_specs, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


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


def test_worker_pods_get_the_pool_token_from_its_secret_as_a_variable_never_a_file(
        ci_rendered: Rendered) -> None:
    """``QL3_WORKER_TOKEN`` from the very Secret key the migration Job imports for the pool;
    no ``--token-file``, no Secret volume and nothing mounted under /run/secrets: a task
    runs as the worker's uid and group and could read a mounted token file."""
    rendered = ci_rendered
    (job,) = rendered.kinds("Job")
    job_volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    workers = _workers(rendered)
    assert workers
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert "--token-file" not in _flags(container["args"])
        assert not [v for v in spec["volumes"] if "secret" in v or "projected" in v]
        assert not [v for v in spec["volumes"] if v["name"] == "token"]
        assert not [m for m in container["volumeMounts"]
                    if m["mountPath"].startswith("/run/secrets")]
        env = {e["name"]: e for e in container["env"]}
        pool = deployment["metadata"]["labels"]["qinglong.io/pool"]
        (imported,) = job_volumes[f"pool-{pool}-token"]["secret"]["items"]
        assert env["QL3_WORKER_TOKEN"] == {"name": "QL3_WORKER_TOKEN", "valueFrom": {
            "secretKeyRef": {"name": job_volumes[f"pool-{pool}-token"]["secret"]["secretName"],
                             "key": imported["key"]}}}


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


def test_only_the_migration_job_mounts_a_pool_token() -> None:
    """A pool token Secret is mounted in the migration Job's pod only (to import its hash);
    the worker pods reference it by secretKeyRef, control and the helm test not at all."""
    rendered = _render()
    mounted = []
    for owner, spec in pod_specs(rendered.docs):
        secrets = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        component = owner["metadata"]["labels"].get("app.kubernetes.io/component")
        if any(s.startswith("ql3-pool") for s in secrets):
            mounted.append(component)
    assert mounted == ["migrate"]
