#!/usr/bin/env python3
"""Refresh the panel's vendored front-end files from the npm registry (docs/panel.md
"Vendored files"; DESIGN §4.6: no CDN, no Node at build or run time).

    python3 scripts/vendor_panel.py                     # fetch the pinned versions again
    python3 scripts/vendor_panel.py htmx.org=2.0.12     # move one package to a new version

For each entry of panel/vendor-manifest.json: download the registry tarball
(https://registry.npmjs.org/<name>/-/<base>-<version>.tgz), check it against the registry's
published sha512 ``integrity``, extract the one named file to ``dest`` (a path in this
repository) and record its sha256. tests/panel/test_vendored.py checks the files against
the manifest. Stdlib only.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "panel" / "vendor-manifest.json"
REGISTRY = "https://registry.npmjs.org"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as reply:  # noqa: S310 (https registry)
        return bytes(reply.read())


def refresh(entry: dict[str, str]) -> dict[str, str]:
    """Fetch ``entry``'s package at its version, verify, extract; the updated entry."""
    name, version = entry["package"], entry["version"]
    meta = json.loads(_get(f"{REGISTRY}/{name.replace('/', '%2F')}/{version}"))
    tarball = _get(meta["dist"]["tarball"])
    algo, _, digest = meta["dist"]["integrity"].partition("-")
    if algo != "sha512" or base64.b64decode(digest) != hashlib.sha512(tarball).digest():
        raise SystemExit(f"{name}@{version}: tarball does not match the registry's integrity")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        member = tar.extractfile(f"package/{entry['file']}")
        if member is None:
            raise SystemExit(f"{name}@{version}: no {entry['file']} in the tarball")
        data = member.read()
    dest = ROOT / entry["dest"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return {**entry, "tarball": meta["dist"]["tarball"], "integrity": meta["dist"]["integrity"],
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": str(len(data))}


def main(argv: list[str]) -> int:
    """Refresh every entry; ``name=version`` arguments change a version first."""
    manifest = json.loads(MANIFEST.read_text())
    bumps = dict(arg.split("=", 1) for arg in argv)
    for entry in manifest["files"]:
        if entry["package"] in bumps:
            entry["version"] = bumps.pop(entry["package"])
    if bumps:
        raise SystemExit(f"not in the manifest: {', '.join(bumps)}")
    manifest["files"] = [refresh(entry) for entry in manifest["files"]]
    MANIFEST.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    for entry in manifest["files"]:
        print(f"{entry['package']}@{entry['version']}  {entry['dest']}  {entry['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
