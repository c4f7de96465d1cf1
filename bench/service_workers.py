"""Throughput of the distributed engine with 1, 2 and 3 worker processes on this machine.

Starts redis-server and a throwaway PostgreSQL cluster on 127.0.0.1 (``grader.service.localcluster``,
the same code the tests use), then for each worker count: a fresh database, ``course serve --engine
celery`` (the web app and the dispatcher) and N ``course worker`` processes (sandbox on), a warm-up of one submission per worker, then a batch of
lesson-4 submissions (the sample class's six notebooks in turn: reference, untouched, wrong
function, syntax error, vetoed answer, partial answers) committed at once. It times the batch from
the commit of the first submission to the last result, and checks that each was graded once.

    .venv/bin/python bench/service_workers.py [--submissions 120] [--workers 1,2,3] [--prefork]

Prints notebooks per second per worker count and the scaling efficiency
(throughput(N) / (N * throughput(1))), with the load average, since the machine may be shared.
Needs ``redis-server`` (or ``$COURSE_REDIS_SERVER``) and Debian's ``postgresql``: scripts/setup.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.service import distributed  # noqa: E402
from grader.service.db import make_engine, migrate, session_factory  # noqa: E402
from grader.service.localcluster import Cluster, add_students, find_pg_bindir, find_redis_server, local_servers  # noqa: E402
from grader.service.models import Job, Result  # noqa: E402
from grader.service.testing import wait_for  # noqa: E402

SAMPLES = [p.read_bytes() for p in sorted((ROOT / "examples/submissions/lesson04").glob("*/lesson04.ipynb"))]


def run_batch(factory: sessionmaker[Session], count: int, tag: str, timeout: float) -> float:
    """Submit ``count`` notebooks at once; return the seconds until the last is graded."""
    uids = add_students(factory, tag, count)
    start = time.monotonic()
    ids = [distributed.submit(factory, uid, "lesson04", SAMPLES[i % len(SAMPLES)]) for i, uid in enumerate(uids)]

    def done() -> bool:
        with factory() as session:
            n = session.scalar(
                select(func.count()).select_from(Job).where(Job.submission_id.in_(ids), Job.state == "done")
            )
            return n == len(ids)

    wait_for(done, timeout, f"{count} submissions to be graded")
    elapsed = time.monotonic() - start
    with factory() as session:
        results = session.scalar(select(func.count()).select_from(Result).where(Result.submission_id.in_(ids)))
        twice = session.scalar(
            select(func.count()).select_from(Job).where(Job.submission_id.in_(ids), Job.attempts != 1)
        )
    if results != len(ids) or twice:
        raise SystemExit(f"{results} results for {len(ids)} submissions, {twice} graded more than once")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--submissions", type=int, default=120)
    p.add_argument("--workers", default="1,2,3", help="comma-separated worker counts")
    p.add_argument("--prefork", action="store_true", help="course worker --prefork: kernels forked from a zygote")
    args = p.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    redis_binary, pg_bindir = find_redis_server(), find_pg_bindir()
    if not redis_binary or not pg_bindir:
        raise SystemExit("needs redis-server and postgresql (scripts/setup installs them)")
    rates: dict[int, float] = {}
    with local_servers(redis_binary, pg_bindir) as (redis_server, postgres):
        for n in counts:
            url = postgres.create_database(f"bench{n}")
            engine = make_engine(url)
            migrate(engine)
            factory = session_factory(engine)
            with tempfile.TemporaryDirectory(prefix="course-bench-") as folder:
                (Path(folder) / "logs").mkdir()
                cluster = Cluster(ROOT, url, redis_server.url, Path(folder) / "logs", lease_s=30, prefork=args.prefork)
                cluster.start_web(Path(folder) / "data")  # course serve --engine celery: the dispatcher
                for i in range(n):
                    cluster.start_worker(f"b{i + 1}")
                try:
                    cluster.wait_for_workers()
                    run_batch(factory, n * 2, f"warm{n}-", 300)  # every worker has its kernel warm
                    load = os.getloadavg()[0]
                    elapsed = run_batch(factory, args.submissions, f"s{n}-", 1800)
                finally:
                    cluster.stop()
                    engine.dispose()
            rates[n] = args.submissions / elapsed
            print(
                f"{n} worker(s): {args.submissions} notebooks in {elapsed:6.1f} s = {rates[n]:5.2f} notebooks/s"
                f"  (load average at start {load:.1f}, {os.cpu_count()} cores)",
                flush=True,
            )
    base = rates.get(1)
    if base:
        for n, rate in rates.items():
            print(f"scaling efficiency with {n}: {rate / (n * base):.2f}")


if __name__ == "__main__":
    main()
