"""How far this process's resident memory rises during a call: the extra peak memory that lesson 11's benchmark
(``benchmarks/bench_attention_ram.py``) and lesson 13's ring attention (``distributed.examples``) report.

On Linux, writing 5 to ``/proc/self/clear_refs`` resets the resident-memory high-water mark (``VmHWM`` in
``/proc/self/status``) to the memory resident now (``VmRSS``), so the peak of what runs next can be read exactly,
even if it was freed again. Where that file cannot be written (not Linux), the ``ru_maxrss`` high-water mark
before and after is used instead, which can only under-count: a peak below an earlier one does not show.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path


def _status_kib(field: str) -> int:
    """A memory field of ``/proc/self/status`` (``"VmRSS"``, ``"VmHWM"``), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _max_rss_kib() -> float:
    """The process's resident-memory high-water mark so far, in KiB (macOS reports bytes, Linux KiB)."""
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max_rss / 1024 if sys.platform == "darwin" else max_rss


class PeakRAM:
    """Made just before a call: resets the high-water mark and notes the resident memory now; ``extra_mib()`` after
    it reads how far resident memory rose above that, at its highest, in MiB.

    ``exact`` says which way it measures: True with ``VmHWM`` reset by ``clear_refs``, False with ``ru_maxrss``.
    """

    def __init__(self):
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.exact = True
        except OSError:
            self.exact = False
        self.before_kib = _status_kib("VmRSS") if self.exact else _max_rss_kib()

    def _peak_kib(self) -> float:
        return _status_kib("VmHWM") if self.exact else _max_rss_kib()

    @property
    def method(self) -> str:
        return "VmHWM reset by clear_refs" if self.exact else "ru_maxrss"

    def extra_mib(self) -> float:
        """The highest resident memory since this object was made, above the memory resident then, in MiB."""
        return max(0.0, self._peak_kib() - self.before_kib) / 1024
