"""Sandbox uids are leased across processes: two graders on one machine never hand out the same uid,
so a fork bomb graded by one cannot exhaust the process limit of a kernel graded by another."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grader.sandbox import UidLease

HOLDER = """
import sys, time
from grader.sandbox import UidLease
leases = [UidLease.acquire() for _ in range(20)]
print(" ".join(str(l.uid) for l in leases), flush=True)
sys.stdin.read()  # hold the leases until the parent closes stdin
"""


@pytest.mark.parametrize("tmpdir", [None, "elsewhere"])
def test_two_processes_never_share_a_uid(tmp_path, tmpdir):
    """Also when the other grader (a service worker, say) has a TMPDIR of its own."""
    env = dict(os.environ, TMPDIR=str(tmp_path)) if tmpdir else None
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None
        theirs = set(map(int, holder.stdout.readline().split()))
        mine = [UidLease.acquire() for _ in range(60)]
        assert len(theirs) == 20 and len({m.uid for m in mine}) == 60
        assert not theirs & {m.uid for m in mine}
        for lease in mine:
            lease.release()
    finally:
        holder.communicate("", timeout=30)


def test_a_released_uid_can_be_leased_again():
    first = UidLease.acquire()
    uid = first.uid
    first.release()
    held: list[UidLease] = []
    try:
        while not held or held[-1].uid != uid:  # leases walk round the range: the freed uid comes back
            held.append(UidLease.acquire())
            assert len(held) <= 2000
    finally:
        for lease in held:
            lease.release()


def test_a_lease_folder_others_may_write_is_refused(tmp_path, monkeypatch):
    """Only root leases uids: a lease folder that anyone may write (where a local user could hold
    every lease and stop grading) is refused with its path, rather than used."""
    import grader.sandbox as sandbox
    from grader.errors import CourseError

    shared = tmp_path / "course-kernel-uids"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(sandbox, "_LOCK_DIR", shared)
    with pytest.raises(CourseError, match="course-kernel-uids"):
        sandbox.UidLease.try_acquire(61000)
    shared.chmod(0o755)
    lease = sandbox.UidLease.try_acquire(61000)
    assert lease is not None
    lease.release()
