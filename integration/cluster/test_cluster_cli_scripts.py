"""``ql3 cluster script`` through the real ``ql3`` binary against a real control replica, a
real worker, PostgreSQL and moto (issue 13 item 1; docs/protocols.md §4.7), at COLUMNS=80:
push a directory (an entry point sourcing a lib), push it again (already there, same
digest), name it from ``task add`` by an 8-digit prefix, ``run --wait``, ``logs`` shows the
script's output; ``script list``/``show``; ``task edit --bundle none``; ``script rm``
refused while a task names it (one line naming the task, exit 1), then ``task rm`` and
``script rm`` succeed. A symlink in the tree and a path that does not exist are refused with
exit 2 before anything is sent: the listing stays empty, and against a port nobody listens
on the error is still the packer's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from cluster_kit import Cluster, free_port
from test_cluster_cli import cli, one_error_line, started_cluster

from qinglong.shared.bundles import pack

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def job_tree(root: Path) -> Path:
    """``run.sh`` (#!, executable) sourcing ``lib/greet.sh``: prints ``hello from a
    bundle``."""
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "greet.sh").write_text('greet() { echo "hello $1"; }\n')
    run = root / "run.sh"
    run.write_text("#!/bin/sh\nset -e\n. ./lib/greet.sh\ngreet 'from a bundle'\n")
    run.chmod(0o755)
    return root


def test_push_run_and_remove_a_bundle_at_80_columns(cluster: Cluster, tmp_path: Path) -> None:
    urls, tokens = started_cluster(cluster, replicas=1)
    url, admin, operator = urls[0], tokens["admin"], tokens["operator"]
    tree = job_tree(tmp_path / "job")
    digest = hashlib.sha256(pack(tree)).hexdigest()

    out = cli(cluster, url, operator, "script", "push", str(tree))
    lines = out.stdout.splitlines()
    assert lines[0] == "pushed new bundle", out.stdout
    assert lines[1] == f"       digest: {digest}"
    assert "members: 3 " in lines[2]  # lib/, lib/greet.sh, run.sh
    assert f"--bundle {digest[:8]} --entry-point FILE" in lines[4]
    again = cli(cluster, url, operator, "script", "push", str(tree))
    assert again.stdout.splitlines()[0].startswith("bundle already exists"), again.stdout
    assert again.stdout.splitlines()[1] == lines[1]
    pushed = json.loads(cli(cluster, url, operator, "script", "push", str(tree), "--json").stdout)
    assert (pushed["digest"], pushed["created"]) == (digest, False)

    cli(cluster, url, admin, "task", "add", "greeter", "--schedule", "@once",
        "--bundle", digest[:8], "--entry-point", "run.sh")
    shown = cli(cluster, url, admin, "task", "show", "greeter").stdout
    assert f"bundle_digest: {digest}" in shown and "  entry_point: run.sh" in shown
    cli(cluster, url, operator, "run", "greeter", "--wait")
    assert "hello from a bundle" in cli(cluster, url, admin, "logs", "greeter@last").stdout

    listed = cli(cluster, url, admin, "script", "list").stdout.splitlines()
    assert listed[0].split() == ["DIGEST", "MEMBERS", "SIZE", "UNPACKED", "TASKS", "PUSHED"]
    row = listed[1].split()
    assert (len(listed), row[0], row[1], row[6]) == (2, digest[:12], "3", "1"), listed
    show = cli(cluster, url, admin, "script", "show", digest[:10]).stdout
    assert f"       digest: {digest}" in show and "      used_by: greeter" in show
    members = [line.split() for line in show.splitlines()[show.splitlines().index(
        "members (3):") + 2:]]
    sizes = [str((tree / p).stat().st_size) for p in ("lib/greet.sh", "run.sh")]
    assert members == [["0755", "-", "lib/"], ["0644", sizes[0], "B", "lib/greet.sh"],
                       ["0755", sizes[1], "B", "run.sh"]], show

    cli(cluster, url, admin, "task", "add", "other", "--schedule", "@once", "--bundle",
        digest, "--entry-point", "./lib/greet.sh")
    edited = cli(cluster, url, admin, "task", "edit", "other", "--bundle", "none", "--shell",
                 "echo plain").stdout
    assert edited.startswith("edited task other: ") and "bundle_digest" in edited, edited
    refused = cli(cluster, url, operator, "script", "rm", digest, code=1)
    line = one_error_line(refused)
    assert line == (f"ql3: error: script bundle {digest[:12]} is in use by task greeter: "
                    "remove it or give another --bundle first"), line
    cli(cluster, url, admin, "task", "rm", "greeter")
    gone = cli(cluster, url, operator, "script", "rm", digest[:8])
    assert gone.stdout == f"removed bundle {digest}\n"
    missing = one_error_line(cli(cluster, url, admin, "script", "show", digest, code=2))
    assert missing == f"ql3: error: no script bundle {digest!r}", missing
    short = one_error_line(cli(cluster, url, admin, "script", "show", "abc123", code=2))
    assert "8 to 64 hex digits" in short, short

    os.symlink("run.sh", tree / "lib" / "link")
    link = one_error_line(cli(cluster, url, operator, "script", "push", str(tree), code=2))
    assert "lib/link: is a symlink" in link, link
    nowhere = one_error_line(cli(cluster, url, operator, "script", "push",
                                 str(tmp_path / "nowhere"), code=2))
    assert nowhere == (f"ql3: error: cannot push: cannot read {str(tmp_path / 'nowhere')!r} "
                       "(No such file or directory)"), nowhere
    assert json.loads(cli(cluster, url, admin, "script", "list", "--json").stdout) == []


def test_a_refused_tree_is_refused_before_anything_is_sent(cluster: Cluster,
                                                           tmp_path: Path) -> None:
    """Nobody listens at the URL: a packer refusal is still the line (exit 2), not
    ``cannot reach control``."""
    tree = job_tree(tmp_path / "job")
    os.symlink("/etc/passwd", tree / "outside")
    dead = f"http://127.0.0.1:{free_port()}"
    for path, words in ((tree, "outside: is a symlink"),
                        (tmp_path / "missing", "No such file or directory")):
        out = cli(cluster, dead, "ql3_" + "x" * 43, "script", "push", str(path), code=2)
        line = one_error_line(out)
        assert line.startswith("ql3: error: cannot push") and words in line, line
