"""The seeded stream: the same bytes for the same seed, on any machine, in any run.

BLAKE2b keyed by the seed, over a counter (``label`` keeps the streams of getrandom
and of the random devices apart): defined here, not by a library's generator, so a
seed means the same bytes whatever Python runs sandlock. Reproducible, hence no
secret: a run with a seed must not make keys anyone relies on (docs/usage.md).
"""

from __future__ import annotations

import _thread

from _blake2 import blake2b  # (hashlib's own, without hashlib's OpenSSL: ~3 ms less to import)

_BLOCK = 64  # BLAKE2b's largest digest


class SeededStream:
    """An endless stream of bytes, read in order by any thread."""

    def __init__(self, seed: int, label: bytes) -> None:
        self._key = seed.to_bytes(8, "little")
        self._label = label[:16]
        self._counter = 0
        self._left = b""
        self._lock = _thread.allocate_lock()

    def read(self, count: int) -> bytes:
        with self._lock:
            parts = [self._left]
            have = len(self._left)
            while have < count:
                block = blake2b(self._counter.to_bytes(16, "little"), digest_size=_BLOCK,
                                        key=self._key, person=self._label).digest()
                self._counter += 1
                parts.append(block)
                have += _BLOCK
            data = b"".join(parts)
            self._left = data[count:]
            return data[:count]
