"""A sha256 computed on a thread of its own, beside the loop that moves the bytes.

hashlib releases the GIL while it hashes a large buffer, so hashing each chunk on a second thread
lets the checksum run at the same time as the next read from the network and the write to disk,
instead of adding its time to theirs (bench/image_bench.py measures the import this serves).
"""

from __future__ import annotations

import hashlib
import queue
import threading

__all__ = ["BackgroundDigest"]

# Chunks waiting to be hashed; bounded so a slow hash holds the download back instead of piling
# the image up in memory.
_DEPTH = 8


class BackgroundDigest:
    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._pending: queue.Queue[bytes | None] = queue.Queue(maxsize=_DEPTH)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (chunk := self._pending.get()) is not None:
            self._digest.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._pending.put(chunk)

    def close(self) -> None:
        """Stop the thread once every chunk given so far is hashed; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._pending.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._digest.hexdigest()
