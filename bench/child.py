"""One measurement in a fresh Python process (bench.memory, bench.cold): ``python -m
<module> <args>`` run from the repository root, which prints its result as one JSON
line (the last stdout line that starts with "{")."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(module: str, args: list[str], timeout: float, env: dict | None = None) \
        -> tuple[dict | None, subprocess.CompletedProcess]:
    """The child's JSON result (None when it failed or printed none) and the finished
    process; `env`: the environment (os.environ by default), the repository put first on
    its PYTHONPATH. A child past `timeout` raises subprocess.TimeoutExpired."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None, proc
    return json.loads(lines[-1]), proc
