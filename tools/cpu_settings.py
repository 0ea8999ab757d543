"""The settings under which CI re-runs every notebook as if on another kind of x86-64 CPU.

    python tools/cpu_settings.py nbval     # make nbval-portability: one setting per line, strict nbval under each
    python tools/cpu_settings.py browser   # make browser-check: the setting its kernels run under

Another CPU rounds the last bits of sums differently, through two libraries: PyTorch's own vector kernels
(``ATEN_CPU_CAPABILITY``) and MKL's matrix products (``MKL_CBWR``, its code path). A CPU has both of one kind,
so each setting emulates one kind of CPU with both: an AVX-512 one, an AVX2 one (most laptops) and one with
neither (the oldest x86-64, or MKL's compatible path on other vendors' CPUs). This machine can emulate its own
kind and the older ones; its own is what ``make nbval`` runs. Of the others, the browser check takes the newest
(the fastest: it runs every notebook anyway and compares every output, as strict nbval does), and
``make nbval-portability`` the rest, so that no notebook runs twice under one setting.
"""

from __future__ import annotations

import sys

# Newest first. A setting is NAME=VALUE pairs joined by commas (make's lists are separated by spaces).
CPUS = {
    "AVX512": "ATEN_CPU_CAPABILITY=avx512,MKL_CBWR=AVX512",
    "AVX2": "ATEN_CPU_CAPABILITY=avx2,MKL_CBWR=AVX2",
    "DEFAULT": "ATEN_CPU_CAPABILITY=default,MKL_CBWR=COMPATIBLE",
}


def other_cpus(native: str) -> list[str]:
    """The settings of the kinds of CPU older than ``native`` (PyTorch's name for this CPU's, e.g. "AVX2"), newest
    first; none for a kind it does not know."""
    kinds = list(CPUS)
    return [CPUS[kind] for kind in kinds[kinds.index(native) + 1 :]] if native in CPUS else []


def settings(job: str, native: str) -> list[str]:
    """The settings ``job`` ("browser" or "nbval") runs under on a CPU of kind ``native``."""
    others = other_cpus(native)
    return others[:1] if job == "browser" else others[1:]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("browser", "nbval"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    import torch

    for setting in settings(argv[0], torch.backends.cpu.get_cpu_capability().upper()):
        print(setting)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
