"""Fewer glibc malloc arenas for the long-running agent.

glibc gives a thread that allocates while another holds the main arena an arena of its own, up to
8 per core, and never gives the memory back to the system. The agent runs a thread per collector
(twelve by default), so a service at 1 s grew to ~0.6 MB more resident memory than the same agent
with two arenas, and two to ~0.8 MB more than one (bench/RESULTS.md, steady: 45.6 against 44.8 MB
at 1 s), for no speed it needs: the collectors' threads take turns under the GIL, and their runs
allocate little. One arena is what MALLOC_ARENA_MAX=1 sets; an operator's own MALLOC_ARENA_MAX is
left as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_ARENA_MAX = -8  # malloc.h
ARENAS = 1


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap the arenas before the collector threads start; True when the cap was set here."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; musl has no mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_ARENA_MAX, arenas) == 1
