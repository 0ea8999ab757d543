"""Stop a hung notebook cell, and never a slow one: a limit on the kernel's work, not on the clock.

A wall-clock limit per cell (papermill's and nbval's timeouts) fails a correct run on a slow or busy machine:
lesson 10's training cell takes about a minute on two idle cores and over ten when other work shares them.
This watchdog instead watches the CPU time of the kernel and every process it started while a cell runs:

- a cell whose kernel used almost no CPU (under 1% of a core) for HANG_SECONDS (default 600) is waiting for
  something that never comes (a lock, input, a process that died): it is hung;
- a cell that used more than CPU_LIMIT_SECONDS of CPU (default 3600, thirty times the slowest cell's need) is
  looping.

A busy machine slows a cell's clock, not the CPU work it needs, so neither rule depends on the machine's
speed or load. The clock is the monotonic one, which stops while the computer sleeps. A stopped cell gets
Ctrl-C (the kernel prints where it was), then is killed if it does not stop; the runner then prints one
sentence saying what happened and what to do (`sentence`). Both limits come from the environment:
`make test NOTEBOOK_HANG_SECONDS=1200 NOTEBOOK_CPU_LIMIT_SECONDS=7200`.

Used by tools/run_notebooks.py (papermill), tools/refresh_notebooks.py (make notebooks) and, as a pytest
plugin, by make nbval (tools/nbval_watchdog.py).
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time

HANG_SECONDS = float(os.environ.get("NOTEBOOK_HANG_SECONDS", 600))
CPU_LIMIT_SECONDS = float(os.environ.get("NOTEBOOK_CPU_LIMIT_SECONDS", 3600))
IDLE_SHARE = 0.01  # a kernel using less than 1% of a core is waiting, not working
KILL_AFTER = 60.0  # seconds a stopped cell has to answer Ctrl-C before its kernel is killed


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds used so far by a process, its living descendants and the children it has reaped."""
    import psutil

    try:
        process = psutil.Process(pid)
        times = process.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in process.children(recursive=True):
            try:
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
            except psutil.Error:
                pass  # ended meanwhile: its time reaches the total through children_user
        return total
    except psutil.Error:
        return None


class CellWatchdog:
    """Watches one kernel (by pid) while a cell runs: `start(pid, number, source)` ... `stop()`."""

    def __init__(
        self,
        notebook: str,
        hang_seconds: float = HANG_SECONDS,
        cpu_limit: float = CPU_LIMIT_SECONDS,
        poll: float = 2.0,
    ) -> None:
        self.notebook = notebook
        self.hang_seconds = hang_seconds
        self.cpu_limit = cpu_limit
        self.poll = min(poll, hang_seconds / 4, cpu_limit / 4)
        self.reason: str | None = None
        self.cell: tuple[int, str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int, number: int, source: str) -> None:
        self.stop()
        self.reason = None
        self.cell = (number, source)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(pid, self._stop), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self, pid: int, stopped: threading.Event) -> None:
        first = tree_cpu_seconds(pid)
        if first is None:
            return
        samples = collections.deque([(time.monotonic(), first)])
        while not stopped.wait(self.poll):
            cpu, now = tree_cpu_seconds(pid), time.monotonic()
            if cpu is None:
                return  # the kernel is gone: the runner reports a dead kernel
            samples.append((now, cpu))
            while len(samples) > 1 and samples[1][0] <= now - self.hang_seconds:
                samples.popleft()  # keep one sample at least hang_seconds old
            oldest_time, oldest_cpu = samples[0]
            if now - oldest_time >= self.hang_seconds and cpu - oldest_cpu < IDLE_SHARE * (now - oldest_time):
                self.reason = f"used no CPU for {self.hang_seconds:.0f} s (it waits for something that never comes)"
            elif cpu - first > self.cpu_limit:
                self.reason = f"used {self.cpu_limit:.0f} s of CPU time (it loops)"
            else:
                continue
            self._halt(pid, stopped)
            return

    def _halt(self, pid: int, stopped: threading.Event) -> None:
        try:
            os.kill(pid, signal.SIGINT)  # what JupyterLab's interrupt does: the traceback shows where it was
            if not stopped.wait(KILL_AFTER):
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def sentence(self) -> str:
        """One sentence: which cell, what it did, what to do."""
        number, source = self.cell or (0, "")
        first_line = next((line.strip() for line in source.splitlines() if line.strip()), "")[:60]
        return (
            f"{self.notebook}, code cell {number} (`{first_line}`), was stopped because it {self.reason}: "
            "run the notebook in JupyterLab (make lab) to see where it waits or loops, or raise "
            "NOTEBOOK_HANG_SECONDS / NOTEBOOK_CPU_LIMIT_SECONDS if it only needs longer."
        )


def nbclient_options(watchdog: CellWatchdog) -> dict:
    """NotebookClient (and papermill engine) options that run `watchdog` around every cell."""
    from jupyter_client.manager import AsyncKernelManager

    kernel = {}

    class WatchedKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kwargs) -> None:  # nbclient awaits this
            await super().start_kernel(**kwargs)
            kernel["pid"] = self.provisioner.pid

    code_cells = collections.Counter()

    def on_cell_execute(cell, cell_index, **_):
        code_cells["n"] += 1
        if "pid" in kernel:
            watchdog.start(kernel["pid"], code_cells["n"], cell.source)

    def on_cell_executed(cell, cell_index, **_):  # the kernel's reply came (a cell's error included)
        watchdog.stop()

    return {
        "kernel_manager_class": WatchedKernelManager,
        "on_cell_execute": on_cell_execute,
        "on_cell_executed": on_cell_executed,
        "timeout": None,  # no wall-clock limit per cell: the watchdog stops a hung one
    }
