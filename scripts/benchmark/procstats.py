"""CPU time and memory of a process tree, read from /proc (Linux only)."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DROP_CACHES = PROC / "sys" / "vm" / "drop_caches"
DROP_PAGE_CACHE_HELP = (
    "sync and drop the page cache before each run (root only, machine-wide): each run "
    "then writes into memory the machine has touched before (docs/profiling.md)"
)


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name, which may itself contain spaces."""
    text = (PROC / str(pid) / "stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def descendants(root: int) -> list[int]:
    """root and every live process below it (a broker may fork workers)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry.name))[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def cpu_seconds(root: int) -> float:
    """utime+stime of the tree, including children the tree has already reaped."""
    ticks = 0
    for pid in descendants(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue  # exited between listing and reading
        # After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
        ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLOCK_TICKS


def minor_faults(root: int) -> int:
    """Minor page faults of the tree: each a page of memory the kernel had to map in."""
    faults = 0
    for pid in descendants(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        faults += int(fields[7]) + int(fields[8])  # minflt, cminflt
    return faults


def memory_kib(root: int, field: str = "VmHWM") -> int:
    """Sum over the tree of a /proc/<pid>/status memory field (VmHWM = peak RSS), in KiB."""
    total = 0
    for pid in descendants(root):
        try:
            lines = (PROC / str(pid) / "status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith(field + ":"):
                total += int(line.split()[1])
                break
    return total


def settle_page_cache() -> bool:
    """Write dirty pages back and drop the clean page cache (root only), so that each run
    writes into memory the machine has touched before. On a VM whose host backs guest
    memory lazily, a page cache growing run by run into untouched memory charged each
    write() with the host's page faults: a follower's kernel time per GiB grew from 0.4 to
    3.8 s over four rounds, two thirds of it copying into new page-cache pages. Returns
    whether the cache was dropped."""
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
    except OSError:
        return False
    return True
