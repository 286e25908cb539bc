"""The service caps glibc's malloc arenas (gpuagent.service.malloc_arenas), counted with malloc_info."""

import subprocess
import sys

import pytest

# Threads that allocate at once, then glibc's own account of its heaps (one <heap> per arena).
PROGRAM = r"""
import ctypes, os, sys, tempfile, threading
from gpuagent.service.malloc_arenas import limit_arenas
print(limit_arenas() if sys.argv[1] == "cap" else "uncapped")
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    for _ in range(2000):
        [bytearray(4096) for _ in range(8)]
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
path = tempfile.mktemp()
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""


def arenas(mode: str, env: dict | None = None) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    said, heaps = out.stdout.split()
    return said, int(heaps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux only")
def test_the_cap_holds_threads_to_one_arena():
    said, capped = arenas("cap")
    if said == "False":
        pytest.skip("this C library has no mallopt (not glibc)")
    assert capped == 1
    _, uncapped = arenas("none")
    assert uncapped > capped  # eight threads at once, uncapped, take arenas of their own


def test_an_operators_setting_is_left_alone():
    import os

    said, heaps = arenas("cap", env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    assert said == "False" and heaps == 2
