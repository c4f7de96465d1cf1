"""Queue depth, worker count and grading latency: for the instructor's page and for Prometheus.

Everything is read from the job and result tables, so the figures are the same whichever engine
grades (embedded or Celery) and whichever host asks. The worker count comes from the engine (the
embedded supervisor knows its processes; Celery answers a ping), passed in as a callable.

The Prometheus text format (version 0.0.4) is small enough to write by hand: ``# HELP``,
``# TYPE`` and one ``name{labels} value`` line per sample.
"""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from .models import Job, Result, Submission, utcnow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOKEN_ENV = "COURSE_METRICS_TOKEN"
WINDOW = timedelta(hours=1)
STATES = ("queued", "running", "done", "failed")


@dataclass(frozen=True)
class Snapshot:
    """The service's load now. Latencies are upload-to-result seconds of the last hour's results."""

    jobs: dict[str, int]  # state -> count
    workers: int | None  # None when the engine cannot tell
    graded_last_hour: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_max_s: float | None

    @property
    def depth(self) -> int:
        """Jobs waiting or in hand: what the workers still have to do."""
        return self.jobs.get("queued", 0) + self.jobs.get("running", 0)

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for the instructor's page, in Chinese."""

        def secs(v: float | None) -> str:
            return "—" if v is None else f"{v:.1f} 秒"

        return [
            ("排队中", str(self.jobs.get("queued", 0))),
            ("评分中", str(self.jobs.get("running", 0))),
            ("评分进程", "—" if self.workers is None else str(self.workers)),
            ("近一小时已评分", str(self.graded_last_hour)),
            ("评分延迟（中位数）", secs(self.latency_p50_s)),
            ("评分延迟（95%）", secs(self.latency_p95_s)),
            ("评分延迟（最长）", secs(self.latency_max_s)),
        ]


def _quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank quantile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def snapshot(factory: sessionmaker[Session], workers: int | None = None) -> Snapshot:
    """Read the figures from the database (two small queries)."""
    since = utcnow() - WINDOW
    with factory() as session:
        counts = {state: n for state, n in session.execute(select(Job.state, func.count()).group_by(Job.state))}
        pairs = session.execute(
            select(Submission.created_at, Result.graded_at)
            .join(Result, Result.submission_id == Submission.id)
            .where(Result.graded_at >= since)
        ).all()
    latencies = [max(0.0, (graded - created).total_seconds()) for created, graded in pairs]
    return Snapshot(
        jobs={state: int(counts.get(state, 0)) for state in STATES},
        workers=workers,
        graded_last_hour=len(latencies),
        latency_p50_s=_quantile(latencies, 0.5),
        latency_p95_s=_quantile(latencies, 0.95),
        latency_max_s=max(latencies) if latencies else None,
    )


def prometheus_text(snap: Snapshot) -> str:
    """The snapshot in the Prometheus text exposition format."""
    lines = [
        "# HELP course_jobs Grading jobs by state.",
        "# TYPE course_jobs gauge",
        *(f'course_jobs{{state="{state}"}} {snap.jobs.get(state, 0)}' for state in STATES),
        "# HELP course_queue_depth Jobs queued or running.",
        "# TYPE course_queue_depth gauge",
        f"course_queue_depth {snap.depth}",
        "# HELP course_graded_last_hour Results stored in the last hour.",
        "# TYPE course_graded_last_hour gauge",
        f"course_graded_last_hour {snap.graded_last_hour}",
    ]
    if snap.workers is not None:
        lines += [
            "# HELP course_workers Grading workers that answer now.",
            "# TYPE course_workers gauge",
            f"course_workers {snap.workers}",
        ]
    quantiles = [(0.5, snap.latency_p50_s), (0.95, snap.latency_p95_s), (1.0, snap.latency_max_s)]
    lines += [
        "# HELP course_grading_latency_seconds Upload to result, results of the last hour.",
        "# TYPE course_grading_latency_seconds summary",
        *(f'course_grading_latency_seconds{{quantile="{q:g}"}} {v:.3f}' for q, v in quantiles if v is not None),
        f"course_grading_latency_seconds_count {snap.graded_last_hour}",
    ]
    return "\n".join(lines) + "\n"


class Cached:
    """A worker count asked at most every ``ttl_s`` seconds: a Celery ping waits for its timeout, and
    Prometheus and the instructor's page may ask often. A failing count reads as unknown (None)."""

    def __init__(self, count: Callable[[], int | None], ttl_s: float = 10.0) -> None:
        self.count = count
        self.ttl_s = ttl_s
        self._at = -ttl_s
        self._value: int | None = None

    def __call__(self) -> int | None:
        now = time.monotonic()
        if now - self._at >= self.ttl_s:
            try:
                self._value = self.count()
            except Exception:  # noqa: BLE001 - a broker that is down must not break the page
                self._value = None
            self._at = now
        return self._value


def install(app: FastAPI, factory: sessionmaker[Session], workers: Callable[[], int | None]) -> None:
    """Add ``GET /metrics`` to the app.

    With ``$COURSE_METRICS_TOKEN`` set, the scraper must send ``Authorization: Bearer <token>``;
    without it the endpoint is open (it shows counts only, no names), so keep it behind the proxy.
    """
    token = os.environ.get(TOKEN_ENV, "")

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> PlainTextResponse:
        if token and not hmac.compare_digest(request.headers.get("authorization", ""), f"Bearer {token}"):
            return PlainTextResponse("unauthorized\n", status_code=401)
        return PlainTextResponse(prometheus_text(snapshot(factory, workers())), media_type=CONTENT_TYPE)
