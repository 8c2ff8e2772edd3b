"""Command line of the hostile-input benchmark; see `scripts/fuzz --help`."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fuzzing.frames import FAMILIES, OPT_IN
from fuzzing.report import render
from fuzzing.runner import Plan, run
from fuzzing.secured_attacks import SECURED_FAMILIES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/fuzz",
        description="Start a Gregor broker at default settings on a free loopback port, send it"
        " hostile frames (random bytes, schema-mutated requests of every served API and"
        " version, lying sizes and counts, compression bombs, pipelining floods) while a"
        " well-behaved client times its round trips, then check crashes, tracebacks, peak"
        " RSS, latency and that the client's data survived. Exits 1 if a target is missed.",
    )
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames to send")
    parser.add_argument("--workers", type=int, default=6, help="fuzzing processes")
    parser.add_argument("--max-seconds", type=float, default=1800, help="stop sending after")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, help="broker data and log (default: a temp dir)")
    parser.add_argument(
        "--secured",
        action="store_true",
        help="attack the pre-authentication state of SSL, SASL_PLAINTEXT and SASL_SSL"
        " listeners (SASL tokens, TLS records, slow and half-open handshakes, authentication"
        " floods, re-authentication abuse) while the canary authenticates on SASL_SSL with"
        " SCRAM-SHA-512; --family then names secured families",
    )
    parser.add_argument(
        "--family",
        action="append",
        choices=[*FAMILIES, *SECURED_FAMILIES],
        help="only this family (repeatable; default: all but metrics_http, in their usual"
        " shares; metrics_http attacks the /metrics endpoint, which it turns on)",
    )
    parser.add_argument("--report-only", action="store_true", help="exit 0 even if missed")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="gregor-fuzz-"))
    available = SECURED_FAMILIES if args.secured else FAMILIES
    wrong = [f for f in args.family or () if f not in available]
    if wrong:
        parser.error(
            f"{', '.join(wrong)}: not a family of {'a' if args.secured else 'no'} --secured run"
        )
    families = tuple(args.family or (f for f in available if f not in OPT_IN))
    plan = Plan(
        args.frames, args.workers, args.max_seconds, args.seed, families, secured=args.secured
    )
    result = run(work_dir, plan)
    text, met = render(result, args.frames)
    print(text)
    return 0 if met or args.report_only else 1
