"""Load on the course service's embedded default: 50 concurrent clients upload 200 notebooks.

Starts ``course serve`` (SQLite, the default number of workers, the sandbox on) on loopback with a
fresh data folder, logs 50 students in, and has them upload the six sample notebooks of lesson 4 in
turn, 4 each, all at once. Then it waits until every submission is graded and checks that nothing
was lost or duplicated: 200 submissions, 200 jobs done, 200 results, each upload's bytes on disk.

    .venv/bin/python bench/service_load.py [--clients 50] [--uploads 200] [--workers 2]

Prints upload latency (p50/p95: request sent to "accepted" redirect) and time to feedback (upload
accepted to graded, p50/p95/max), and the grading throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.service.db import make_engine, migrate, session_factory  # noqa: E402
from grader.service.models import Job, Result, Submission  # noqa: E402
from grader.service.store import UploadStore  # noqa: E402
from grader.service.testing import csrf_of, make_user, serving  # noqa: E402

SAMPLES = sorted((ROOT / "examples/submissions/lesson04").glob("*/lesson04.ipynb"))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def client_run(
    base: str, username: str, notebooks: list[bytes], accepted: list[tuple[int, float, float]]
) -> None:
    async with httpx2.AsyncClient(base_url=base, timeout=120) as client:
        page = await client.get("/login")
        await client.post("/login", data={"csrf": csrf_of(page.text), "username": username, "password": "password-1"})
        token = csrf_of((await client.get("/lessons/lesson04")).text)
        for data in notebooks:
            start = time.perf_counter()
            response = await client.post(
                "/lessons/lesson04/submit", data={"csrf": token}, files={"notebook": ("lesson04.ipynb", data)}
            )
            done = time.perf_counter()
            if response.status_code != 303:
                raise SystemExit(f"{username}: upload refused with {response.status_code}: {response.text[:300]}")
            accepted.append((int(response.headers["location"].rsplit("/", 1)[1]), done - start, done))


async def main_async(args: argparse.Namespace) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="course-bench-"))
    engine = make_engine(f"sqlite:///{data_dir / 'course.db'}")
    migrate(engine)
    factory = session_factory(engine)
    names = [f"b{i:03d}" for i in range(args.clients)]
    for name in names:
        make_user(factory, name)
    files = [p.read_bytes() for p in SAMPLES]
    plan: dict[str, list[bytes]] = {name: [] for name in names}
    for n in range(args.uploads):
        plan[names[n % len(names)]].append(files[n % len(files)])
    accepted: list[tuple[int, float, float]] = []
    with serving(data_dir, ROOT, workers=args.workers) as (_proc, base):
        t0 = time.perf_counter()
        await asyncio.gather(*(client_run(base, name, plan[name], accepted) for name in names))
        uploaded = time.perf_counter()
        graded_at: dict[int, float] = {}
        while len(graded_at) < len(accepted):
            with factory() as session:
                rows = session.execute(select(Submission.id, Submission.status)).all()
            now = time.perf_counter()
            for sid, status in rows:
                if status in ("graded", "failed") and sid not in graded_at:
                    graded_at[sid] = now
            if now - uploaded > args.timeout:
                raise SystemExit(f"only {len(graded_at)} of {len(accepted)} graded after {args.timeout} s")
            await asyncio.sleep(0.2)
        finished = time.perf_counter()
    with factory() as session:
        subs = session.scalars(select(Submission)).all()
        results = session.scalar(select(func.count()).select_from(Result))
        jobs_done = session.scalar(select(func.count()).select_from(Job).where(Job.state == "done"))
        store = UploadStore(data_dir / "uploads")
        intact = all(hashlib.sha256(store.read(s.sha256)).hexdigest() == s.sha256 for s in subs)
        failed = sum(s.status != "graded" for s in subs)
    ids = [a[0] for a in accepted]
    assert len(ids) == args.uploads and len(set(ids)) == args.uploads, "an upload was lost or duplicated"
    assert len(subs) == args.uploads and results == args.uploads, (len(subs), results)
    assert jobs_done == args.uploads and intact and failed == 0, (jobs_done, intact, failed)
    latency = [a[1] * 1000 for a in accepted]
    feedback = [graded_at[sid] - at for sid, _lat, at in accepted]
    print(f"{args.uploads} uploads from {args.clients} clients, {args.workers} workers, sandbox on")
    print(f"nothing lost or duplicated: {args.uploads} submissions, jobs done and results; every file intact")
    print(f"upload latency: p50 {pct(latency, 0.5):.0f} ms, p95 {pct(latency, 0.95):.0f} ms, max {max(latency):.0f} ms")
    print(f"all uploads accepted in {uploaded - t0:.1f} s")
    print(
        f"time to feedback: p50 {pct(feedback, 0.5):.1f} s, p95 {pct(feedback, 0.95):.1f} s, "
        f"max {max(feedback):.1f} s (the queue drains at the workers' pace)"
    )
    print(f"graded {args.uploads} in {finished - t0:.1f} s: {args.uploads / (finished - t0):.2f} notebooks/s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1200)
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
