"""`make lab`, the README's first command, starts a JupyterLab server that serves the series."""

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_make_lab_serves_the_notebooks(tmp_path):
    # On a fresh clone `make lab` first creates .venv (minutes): do that step on its own, so that the 120 s
    # below measure only the server's start.
    subprocess.run(["make", "--no-print-directory", ".venv/.installed"], cwd=ROOT, check=True, timeout=1800)
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token= --ServerApp.password="
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                status, _ = get(f"http://127.0.0.1:{port}/lab")
                break
            except OSError:
                assert server.poll() is None, "make lab exited before serving"
                assert time.monotonic() < deadline, "JupyterLab did not answer within 120 s"
                time.sleep(0.5)
        assert status == 200
        _, listing = get(f"http://127.0.0.1:{port}/api/contents")  # the server's root is notebooks/
        notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
        for name in notebooks:
            assert f'"name": "{name}"' in listing or f'"name":"{name}"' in listing, name
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
