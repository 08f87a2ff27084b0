"""Memory test helpers: an agent's memory settings in a temp dir, a run in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers.scripted_server import ScriptedServer

__all__ = ["FACT", "settings", "sent_text", "run_elsewhere"]

FACT = "the sales data is in s3://acme/sales/2026/ and uses ; as delimiter"


def settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"memory": "on", "memory_path": str(tmp_path / "project.sqlite"),
            "memory_global_path": str(tmp_path / "global.sqlite"), "python_tool": False,
            "file_tools": False, "approval": "auto", "agents_md": False, "mcp_files": False,
            "memory_write": "off", **extra}


def sent_text(body: dict[str, Any]) -> str:
    """Everything the request carried in its messages, as one string."""
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


RUN = textwrap.dedent("""
    import json, sys
    from ipyagent import Agent
    base_url, settings, task, save = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    agent = Agent(model="scripted", base_url=base_url, **settings)
    result = agent.run(task)
    agent.save(save)
    print(result.stop_reason)
""")


def run_elsewhere(srv: ScriptedServer, tmp_path: Path, task: str, name: str,
                  **extra: Any) -> Path:
    """Run ``task`` in a new Python process against ``srv``; the transcript it saved."""
    save = tmp_path / f"{name}.ipynb"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", RUN, srv.base_url,
                           json.dumps(settings(tmp_path, **extra)), task, str(save)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    return save
