"""NOTES.txt gives each pool's own facts and commands that work as printed: where the admin
token for the curl comes from (the helm test's token Secret when one is known, else how to
make one), the Service's in-cluster names, singular counts, each pool's disruption budget."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, Rendered, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _notes(**values: Any) -> str:
    return render({**load_values(MINIMAL), **values}).notes


def test_the_admin_token_comes_from_a_secret_that_holds_it(full: Rendered) -> None:
    """full: the bootstrap admin's Secret holds only a SHA-256, so the token is read from
    the helm test's Secret; plain: from the bootstrap admin's Secret."""
    assert ("ADMIN_TOKEN=$(kubectl -n tasks get secret ql3-test-admin "
            "-o jsonpath='{.data.token}' | base64 -d)") in full.notes
    plain = render(load_values(next(p for p in CI_VALUES if p.name == "plain-values.yaml")))
    assert ("ADMIN_TOKEN=$(kubectl -n tasks get secret ql3-admin "
            "-o jsonpath='{.data.token}' | base64 -d)") in plain.notes
    dotted = _notes(tests={"token": {"existingSecret": "ops", "key": "admin.token"}})
    assert "get secret ops -o jsonpath='{.data.admin\\.token}'" in dotted


def test_without_a_known_admin_token_the_notes_say_how_to_make_one(
        minimal: Rendered) -> None:
    assert "ADMIN_TOKEN=$(kubectl" not in minimal.notes
    assert "ql3 control token create --name <you> --scope admin" in minimal.notes
    assert "QL3_DATABASE_URL" in minimal.notes


def test_the_service_is_named_for_other_namespaces_and_load_balancers(
        full: Rendered, minimal: Rendered) -> None:
    """full: an internal LoadBalancer, whose address the notes show how to read."""
    assert "http://ql3-qinglong-control.tasks.svc:8080" in minimal.notes
    assert "loadBalancer" not in minimal.notes
    assert ("kubectl -n tasks get svc ql3-qinglong-control "
            "-o jsonpath='{.status.loadBalancer.ingress[0]}'") in full.notes
    assert "/metrics answers without a token" in full.notes


def test_counts_are_singular_when_one_and_each_pool_names_its_budget(
        full: Rendered) -> None:
    plain = render(load_values(next(p for p in CI_VALUES if p.name == "plain-values.yaml")))
    assert "Control API (1 replica)" in plain.notes
    assert "ql3-qinglong-worker-edge: 1 replica x 1 attempt, labels site=lab, " \
           "drain budget 30 s, at most 1 evicted at a time" in plain.notes
    assert "Control API (5 replicas)" in full.notes
    assert "ql3-qinglong-worker-gpu: 1-4 replicas (HPA) x 1 attempt, labels gpu=yes,zone=a, " \
           "drain budget 120 s, at most 1 evicted at a time" in full.notes
    assert "ql3-qinglong-worker-spare: 0 replicas x 4 attempts, labels (none), " \
           "drain budget 0 s\n" in full.notes  # no budget over no pod
