"""The summary of a fuzz run: what was sent, what the broker did, which targets it met."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from fuzzing.runner import RunResult

RSS_TARGET_MB = 300
P99_TARGET_MS = 50.0
# A frame of the broker's own code in a traceback: `  File "/repo/apis/produce.py", line 9, in f`.
_FRAME = re.compile(
    r'^\s+File "(?:.*/)?((?:apis|coordinator|controller|log|replica|server|wire)'
    r'/[^"]+)", line \d+, in (\S+)'
)


@dataclass
class Target:
    name: str
    value: str
    goal: str
    met: bool


def tracebacks(log: str) -> Counter[str]:
    """Tracebacks in a broker log, as 'Exception: message at deepest/broker/file.py:function'."""
    found: Counter[str] = Counter()
    where = None  # inside a traceback: its deepest broker frame so far
    for line in log.splitlines():
        if line.startswith("Traceback"):
            where = "no broker frame"
        elif where is not None:
            frame = _FRAME.match(line)
            if frame:
                where = f"{frame.group(1)}:{frame.group(2)}"
            elif not line.startswith(" "):
                found[f"{line[:60]} at {where}"] += 1
                where = None
    return found


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def targets(result: RunResult, frames_wanted: int, traceback_count: int) -> list[Target]:
    latencies = result.canary.latencies_ms
    p99 = percentile(latencies, 0.99)
    rss_mb = result.peak_rss_kib / 1024
    problems = result.problems_after_fuzz + result.problems_after_restart
    sent = result.frames.total()
    return [
        Target("frames sent", f"{sent:,}", f">= {frames_wanted:,}", sent >= frames_wanted),
        Target("broker crashes", str(len(result.crashes)), "0", not result.crashes),
        Target("tracebacks in log", str(traceback_count), "0", traceback_count == 0),
        Target(
            "peak RSS (VmHWM)",
            f"{rss_mb:.0f} MB",
            f"<= {RSS_TARGET_MB} MB",
            rss_mb <= RSS_TARGET_MB,
        ),
        Target(
            "canary p99 latency",
            f"{p99:.1f} ms",
            f"<= {P99_TARGET_MS:.0f} ms",
            p99 <= P99_TARGET_MS,
        ),
        Target(
            "canary failed calls", str(len(result.canary.errors)), "0", not result.canary.errors
        ),
        Target(
            "data intact (after fuzz, after restart)",
            "yes" if not problems else "NO",
            "yes",
            not problems,
        ),
    ]


def render(result: RunResult, frames_wanted: int) -> tuple[str, bool]:
    """The summary text, and whether every target was met."""
    log = result.log_path.read_text(errors="replace") if result.log_path else ""
    found = tracebacks(log)
    checks = targets(result, frames_wanted, sum(found.values()))
    lines = [
        f"Fuzzed for {result.seconds:.0f} s over {result.connections:,} connections"
        f" ({result.frames.total() / max(result.seconds, 1e-9):,.0f} frames/s); broker CPU"
        f" {100 * result.broker_cpu_s / max(result.seconds, 1e-9):.0f}% of one core",
        "",
    ]
    lines += [f"  {family:<20} {count:>12,} frames" for family, count in result.frames.items()]
    if result.notes:
        lines += ["", *(f"  {note}: {count:,}" for note, count in sorted(result.notes.items()))]
    latencies = result.canary.latencies_ms
    lines += [
        "",
        f"canary round trips: {len(latencies):,} during the fuzz; p50 "
        f"{percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms,"
        f" max {max(latencies, default=float('nan')):.1f} ms"
        f" (before the fuzz: p50 {percentile(result.baseline_ms, 0.5):.1f} ms,"
        f" p99 {percentile(result.baseline_ms, 0.99):.1f} ms)",
        "",
        f"  {'check':<42} {'value':>12}  {'target':<12} result",
    ]
    lines += [
        f"  {t.name:<42} {t.value:>12}  {t.goal:<12} {'ok' if t.met else 'MISSED'}" for t in checks
    ]
    details = [
        *(f"crash: {c}" for c in result.crashes),
        *(f"traceback x{n}: {kind}" for kind, n in found.most_common()),
        *(f"canary error: {e}" for e in result.canary.errors[:10]),
        *(f"after fuzz: {p}" for p in result.problems_after_fuzz),
        *(f"after restart: {p}" for p in result.problems_after_restart),
    ]
    if details:
        lines += ["", *details]
    lines += ["", f"broker log: {result.log_path}"]
    return "\n".join(lines), all(t.met for t in checks)
