"""`scripts/bench --profile DIR`: where a broker's CPU goes during each scenario.

Two samplers watch the broker process for the whole scenario: py-spy (Python frames of
every thread that is running, not waiting) and, where the machine has it, Linux `perf`
(cpu-clock with call graphs: the kernel, libc and C extensions, which py-spy cannot see).
Each writes its raw samples to DIR, and a summary of both goes to DIR/<scenario>.txt.
docs/profiling.md says how to read them.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from .artifacts import CACHE

PY_SPY = "py-spy==0.4.3"
PY_SPY_RATE = 199  # samples a second, off the broker's own timer frequencies
PERF_RATE = 499
TOP = 30


def ensure_py_spy(cache: Path = CACHE) -> Path:
    """The py-spy binary, installed on first use into a virtualenv of its own in the cache."""
    venv = cache / "py-spy"
    binary = venv / "bin" / "py-spy"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([venv / "bin" / "pip", "install", "--quiet", PY_SPY], check=True)
    return binary


class Profile:
    """Samples ``pid`` from entry to exit into ``out``.{pyspy,perf.data,txt}."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self._samplers: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Profile:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._samplers.append(
            subprocess.Popen(
                [ensure_py_spy(), "record", "--pid", str(self.pid), "--rate", str(PY_SPY_RATE)]
                + ["--nonblocking", "--format", "raw", "--output", str(self._pyspy)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        if shutil.which("perf"):
            self._samplers.append(
                subprocess.Popen(
                    ["perf", "record", "--freq", str(PERF_RATE), "--call-graph", "fp"]
                    + ["--pid", str(self.pid), "--output", str(self._perf)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sampler in self._samplers:
            sampler.send_signal(signal.SIGINT)  # both write out what they have on SIGINT
        for sampler in self._samplers:
            try:
                sampler.wait(60)
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()
        if exc_type is None:
            self.out.with_suffix(".txt").write_text(self.summary())

    @property
    def _pyspy(self) -> Path:
        return self.out.with_suffix(".pyspy")

    @property
    def _perf(self) -> Path:
        return self.out.with_suffix(".perf.data")

    def summary(self) -> str:
        parts = []
        if self._pyspy.exists():
            parts.append(summarize_pyspy(self._pyspy.read_text()))
        if self._perf.exists():
            report = subprocess.run(
                ["perf", "report", "--input", str(self._perf), "--stdio", "--no-children"]
                + ["--sort", "dso,sym", "--percent-limit", "0.5", "-g", "none"],
                capture_output=True,
                text=True,
            )
            lines = [ln for ln in report.stdout.splitlines() if ln and not ln.startswith("#")]
            parts.append("perf (cpu-clock), self time by library and symbol:\n" + "\n".join(lines))
        return "\n\n".join(parts) + "\n"


def summarize_pyspy(raw: str) -> str:
    """py-spy's raw format (a stack per line, frames joined by ';', then a count) as the
    functions with the most samples: on top of the stack (self) and anywhere in it."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            anywhere[frame] += int(count)
    if not total:
        return "py-spy: no samples"

    def table(counts: collections.Counter[str]) -> str:
        return "\n".join(f"{100 * n / total:6.1f} %  {f}" for f, n in counts.most_common(TOP))

    return (
        f"py-spy: {total} samples of running threads\n-- self:\n{table(own)}\n"
        f"-- inclusive:\n{table(anywhere)}"
    )
