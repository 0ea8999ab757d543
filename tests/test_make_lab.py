"""`make lab`, the README's first command, starts a JupyterLab server that serves the series: the repository's
root, so that the lessons' solution links open, with the browser sent to the lesson list."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # let the 302 surface as an HTTPError, to read where it points


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def redirect_target(url: str) -> str:
    try:
        urllib.request.build_opener(NoRedirect).open(url, timeout=5)
    except urllib.error.HTTPError as error:
        assert error.code in (301, 302), error.code
        return error.headers["Location"]
    raise AssertionError(f"{url} did not redirect")


def kernel_answers(channels: str, timeout: float = 120) -> bool:
    """Whether a kernel answers a kernel_info request on its websocket within ``timeout`` seconds: by then it has
    started, and written whatever it warns at start-up."""
    import asyncio
    import uuid

    from tornado.websocket import websocket_connect

    async def ask() -> bool:
        connection = await websocket_connect(channels)
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "kernel_info_request", "session": msg_id, "username": "test"}
        header |= {"version": "5.3", "date": ""}
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell"}
        await connection.write_message(json.dumps(message))
        while True:
            reply = await connection.read_message()
            if reply is None:
                return False
            if isinstance(reply, str) and json.loads(reply).get("parent_header", {}).get("msg_id") == msg_id:
                return True

    return asyncio.run(asyncio.wait_for(ask(), timeout))


@pytest.mark.slow
def test_make_lab_serves_the_repository_and_opens_the_lesson_list(tmp_path):
    # On a fresh clone `make lab` first creates .venv (minutes): do that step on its own, so that the 120 s
    # below measure only the server's start.
    subprocess.run(["make", "--no-print-directory", ".venv/.installed"], cwd=ROOT, check=True, timeout=1800)
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token= --ServerApp.password="
    args += " --ServerApp.disable_check_xsrf=True"  # so that the test may start a kernel with a plain POST
    log = tmp_path / "lab.log"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    log_file = log.open("w")
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                status, _ = get(f"{base}/lab")
                break
            except OSError:
                assert server.poll() is None, "make lab exited before serving"
                assert time.monotonic() < deadline, "JupyterLab did not answer within 120 s"
                time.sleep(0.5)
        assert status == 200
        # what the browser opens (the server's default URL): the file browser in notebooks/, the lesson list
        assert urllib.parse.urlsplit(redirect_target(f"{base}/")).path == "/lab/tree/notebooks"
        _, listing = get(f"{base}/api/contents/notebooks")
        names = {item["name"] for item in json.loads(listing)["content"]}
        assert {p.name for p in (ROOT / "notebooks").glob("*.ipynb")} <= names
        # the solution link of every lesson leads to a file the server gives out (a root of notebooks/ gave 403)
        for solution in sorted((ROOT / "solutions").glob("*.ipynb")):
            status, text = get(f"{base}/api/contents/solutions/{solution.name}?content=0")
            assert status == 200 and json.loads(text)["type"] == "notebook", solution.name
        # the custom.css that labels a solutions notebook's tab "Solutions · ..." (a lesson's tab has the same name)
        status, css = get(f"{base}/custom/custom.css")
        assert status == 200 and "Solutions · " in css, css[:200]
        # a kernel starts without ipykernel's warning that its transport is "susceptible to eavesdropping"
        request = urllib.request.Request(f"{base}/api/kernels", data=b'{"name": "python3"}', method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            kernel = json.loads(response.read())["id"]
        assert kernel_answers(f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels"), "the kernel did not answer"
        assert "eavesdropping" not in log.read_text(), log.read_text()[-2000:]
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        log_file.close()
