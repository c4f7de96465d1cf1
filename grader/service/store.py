"""Content-addressed upload store: ``uploads/ab/abcdef....ipynb``, named by the file's sha256.

A file is written to a temporary name in the same folder, fsynced, renamed into place and the
folder fsynced, so that once ``put`` returns the bytes are on disk under their final name; only
then does the caller commit the database row. A crash before the rename leaves at most a temp file
(removed on the next start); a crash after it leaves a file no row names, which is harmless. No
stored name ever comes from user input.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from pathlib import Path

from sqlalchemy.orm import Session

SHA256 = re.compile(r"[0-9a-f]{64}")
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


class StoreFull(Exception):
    """The disk (or the quota) is full; nothing was stored."""


class UploadStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        if not SHA256.fullmatch(sha256):
            raise ValueError("not a sha256")
        return self.root / sha256[:2] / f"{sha256}.ipynb"

    def put(self, data: bytes) -> str:
        """Store ``data`` durably and return its sha256. Raise StoreFull, leaving nothing behind."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.path(digest)
        if final.is_file() and final.stat().st_size == len(data):
            return digest  # the same bytes are already stored
        folder = final.parent
        tmp = folder / f".tmp-{digest}-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            folder.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            _fsync_dir(folder)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno in FULL_DISK:
                raise StoreFull(str(exc)) from None
            raise
        return digest

    def put_in(self, session: Session, data: bytes) -> str:
        """Store ``data`` so that it is durable by the time ``session`` commits the row naming it.

        Here the file is written and fsynced at once (the session is not used); the distributed
        engine's store (``distributed.DatabaseUploads``) adds the bytes to the session instead, so
        the upload route calls this one method whichever engine runs.
        """
        return self.put(data)

    def read(self, sha256: str) -> bytes:
        return self.path(sha256).read_bytes()

    def remove_temp_files(self) -> int:
        """Remove what an interrupted ``put`` left; run at start, before any upload."""
        count = 0
        for tmp in self.root.glob("*/.tmp-*"):
            tmp.unlink(missing_ok=True)
            count += 1
        return count


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
