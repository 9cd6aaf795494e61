"""The hook pods (the migration Job, the helm test pod): their arguments survive any value
the schema allows (every templated argument is quoted), and they are scheduled like
control unless ``migration.*`` / ``tests.*`` say otherwise."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, containers, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _job_steps(values: dict[str, Any]) -> dict[str, list[str]]:
    (job,) = render(values).kinds("Job")
    return {c["name"]: c["args"] for c in containers(job["spec"]["template"]["spec"])}


def test_an_admin_name_yaml_would_misread_is_passed_as_written() -> None:
    """``ops: admin #1`` unquoted is a mapping with a comment; quoted, one argument."""
    values = load_values(MINIMAL)
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin", "name": "ops: admin #1"}
    args = _job_steps(values)["token-bootstrap-admin"]
    assert args == ["control", "token", "import", "--ensure", "--name=ops: admin #1",
                    "--scope=admin", "--token-file=/run/secrets/qinglong/admin/token"]
