"""Start a process group of ``world_size`` processes on this machine, run one function in each, collect the results.

``torch.distributed`` runs one copy of the program per *rank*; the ranks meet at an address (here a free port on
127.0.0.1) and exchange tensors through a *backend*: gloo on CPUs, nccl on GPUs. :func:`run` is the launch that
works in a notebook: its processes start fresh, none of the notebook's state in them (forked from a *fork server*
that has imported PyTorch once, so a launch costs no PyTorch import per rank; ``spawn``, a new interpreter per rank,
where there is no fork server), so the function must be importable by module and name (a function defined in a
notebook cell is not). The command-line launch is ``torchrun`` (see ``train_gpt``).
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import pickle
import queue
import socket
import traceback

import torch
import torch.distributed as dist

from .._checks import check_bool, check_positive_int, check_positive_real

DEFAULT_TIMEOUT = 60.0  # seconds a collective waits for the other ranks before it fails instead of hanging


class RankError(RuntimeError):
    """A rank of :func:`run` raised, or died, or did not finish in time; the message names the rank."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_count() -> int:
    """The CPUs this process may run on (a container's limit, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _start_context():
    """How the ranks start: forked from a fork server that has imported torch and this module (started once per
    process, on the first launch), else ``spawn``. Both start clean processes, never a copy of the caller."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", __name__])
    return context


def _worker(fn, rank: int, world_size: int, port: int, timeout: float, args: tuple, results) -> None:
    """One rank: join the group, run ``fn(rank, world_size, *args)``, report ``(rank, ok, value)``, leave."""
    torch.set_num_threads(1)  # each rank one thread: the same arithmetic in every run, and no fight for cores
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        dist.barrier()  # every rank connected first: one that fails at once and leaves must not break a peer's joining
        value = fn(rank, world_size, *args)
    except BaseException as error:  # report every failure, KeyboardInterrupt included, to the parent
        # before leaving the group: the ranks waiting for this one then fail too, and must not be reported first
        results.put((rank, False, (f"{type(error).__name__}: {error}", traceback.format_exc())))
        _leave_group()
        return
    _leave_group()
    # Plain pickle copies tensors into the message; the queue's own pickler would share their memory with the
    # parent through this process, which is about to exit.
    results.put((rank, True, pickle.dumps(value)))


def _leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def run(fn, world_size: int, *args, timeout: float = DEFAULT_TIMEOUT, oversubscribe: bool = False) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes joined in a gloo process group.

    Args:
        fn: a module-level function (the new processes import it by module and name).
        world_size: number of processes, from 1 to the number of CPUs this process may use.
        *args: passed to every rank; they and the return values travel by pickle.
        timeout: seconds a collective (``all_reduce``, ``send``/``recv``...) waits for the other ranks before it
            raises; the whole run is given ``timeout`` seconds more than that to finish.
        oversubscribe: allow more processes than CPUs (they then time-share the cores: fine to check results,
            meaningless for timings).

    Returns:
        The list of every rank's return value, in rank order.

    Raises:
        RankError: naming the first rank that raised (with its traceback), died or did not finish in time; the
            other ranks are stopped, and no process is left behind, on an error or on Ctrl-C.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    check_positive_int("world_size", world_size)
    check_bool("oversubscribe", oversubscribe)
    if world_size > cpu_count() and not oversubscribe:
        raise ValueError(
            f"world_size={world_size} is more than the {cpu_count()} CPU(s) this process may use: the ranks would "
            f"share cores; use world_size <= {cpu_count()}, or oversubscribe=True to check results only"
        )
    timeout = check_positive_real("timeout", timeout)
    context = _start_context()
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=_worker, args=(fn, rank, world_size, port, timeout, args, results), daemon=True)
        for rank in range(world_size)
    ]
    try:
        for process in processes:
            process.start()
        return _collect(processes, results, 2 * timeout + 30)
    finally:
        _stop(processes)
        results.close()


def _stop(processes) -> None:
    """Stop every rank still running (terminate, then kill one that does not end within 5 s) and reap them all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is not None:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


def _collect(processes, results, deadline: float) -> list:
    """Wait for one report per rank; raise :class:`RankError` at the first failure, death or at the deadline."""
    values: dict[int, object] = {}
    waited = 0.0
    while len(values) < len(processes):
        try:
            rank, ok, value = results.get(timeout=0.5)
        except queue.Empty:
            waited += 0.5
            if any(rank not in values and _died(process) for rank, process in enumerate(processes)):
                raise _first_cause(_other_failures(results), processes) from None
            if waited > deadline:
                missing = sorted(set(range(len(processes))) - set(values))
                raise RankError(f"rank(s) {missing} did not finish within {deadline:.0f} s") from None
            continue
        if not ok:
            raise _first_cause([(rank, value), *_other_failures(results)], processes)
        values[rank] = pickle.loads(value)
    return [values[rank] for rank in range(len(processes))]


def _died(process) -> bool:
    """The process ended without reporting: a rank that reports (a result or an error) exits with code 0."""
    return process.exitcode not in (None, 0)


# gloo's words when a rank's partner left the group: a consequence of another rank's failure, not its cause
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker")


def _other_failures(results, wait: float = 1.0) -> list:
    """The failures other ranks report within ``wait`` seconds, as ``(rank, (summary, traceback))``."""
    failures = []
    try:
        while True:
            rank, ok, value = results.get(timeout=wait)
            if not ok:
                failures.append((rank, value))
    except queue.Empty:
        return failures


def _first_cause(failures: list, processes) -> RankError:
    """The error of the rank that failed first: a rank whose partner left the group (or died) only followed it.

    ``failures``: the ranks' reported errors, in order of arrival, as ``(rank, (summary, traceback))``."""
    causes = [f for f in failures if not any(words in f[1][0] for words in _PEER_GONE)]
    dead = [(rank, process.exitcode) for rank, process in enumerate(processes) if _died(process)]
    if not causes and dead:  # the others lost their partner: the rank that died is the cause
        rank, exitcode = dead[0]
        return RankError(f"rank {rank} of {len(processes)} died with exit code {exitcode} before returning")
    rank, (summary, trace) = (causes or failures)[0]
    return RankError(f"rank {rank} of {len(processes)} failed: {summary}\n\nrank {rank}'s traceback:\n{trace}")
