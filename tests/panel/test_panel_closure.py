"""The local panel's import closure has no pydantic (DESIGN §4.6: Starlette, not FastAPI)
and no cluster library, in a fresh interpreter that loads everything `ql3 local web` does."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pydantic", "fastapi", "psycopg", "sqlalchemy", "boto3", "botocore")


def test_local_web_loads_no_pydantic_nor_cluster_library() -> None:
    code = (
        "import sys, json, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "import qinglong.local.app.cli\n"
        "import qinglong.local.app.cli_web\n"
        "import qinglong.panel.local_web as w\n"
        "from starlette.testclient import TestClient\n"
        "from qinglong.panel.security import Sessions\n"
        "app = w.create_app(w.LocalPanelBackend('/nonexistent.sock'), Sessions('t'))\n"
        "c = TestClient(app, base_url='http://x')\n"
        "c.get('/signin?token=t'); assert c.get('/').status_code == 503\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded = set(json.loads(out))
    assert {"starlette", "jinja2", "uvicorn"} <= loaded  # the closure is real
    assert sorted(loaded & set(HEAVY)) == []
