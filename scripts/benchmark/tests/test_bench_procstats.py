import os
import signal
import subprocess
import sys

from benchmark.procstats import cpu_seconds, descendants, memory_kib, minor_faults

SPIN_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
buf = bytearray(64 << 20)  # touched, so it counts in RSS
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
print("spun", flush=True)
time.sleep(60)
"""


def test_tree_cpu_memory_and_grandchild() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPIN_CHILD], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(proc.stdout.readline())
        assert proc.stdout.readline() == "spun\n"
        assert set(descendants(proc.pid)) >= {proc.pid, grandchild}
        assert cpu_seconds(proc.pid) >= 0.45
        assert memory_kib(proc.pid) >= 64 << 10
        assert minor_faults(proc.pid) >= (64 << 20) // os.sysconf(
            "SC_PAGE_SIZE"
        )  # its touched buffer
        assert memory_kib(proc.pid, "VmRSS") <= memory_kib(proc.pid)
    finally:
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)
        proc.kill()
        proc.wait()
