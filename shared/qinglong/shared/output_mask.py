"""Streaming masker of secret values in task output (docs/operations.md §9).

The exact bytes of each secret value of at least ``MIN_SECRET_BYTES`` bytes are replaced by
``***`` wherever they occur in the output stream, however the stream is cut into writes: the
masker holds back only an end of the output that could still begin a value — at most
``len(longest secret) - 1`` bytes, and nothing after a line that cannot (live output keeps
flowing) — until the next write or :meth:`OutputMasker.flush`. Matches are taken leftmost
first, the longest value at one position first, so masking a stream piecewise gives the
bytes masking it whole gives (tests/shared/test_shared_output_mask.py). Work is linear in
the stream for a fixed set of values: each value's next occurrence is searched once per
position it can advance to, and each write checks at most ``len(longest)`` end positions.

Pure, with no imports: the local attempt wrapper runs this very file, verified against its
pinned SHA-256 (``local/.../process/wrapper_digest.py``) and compiled by the launcher, and
the cluster worker can import it.
"""


MIN_SECRET_BYTES = 6
MASK = b"***"


class OutputMasker:
    """Replace secret values in a byte stream fed in pieces.

    ``secrets``: the values (bytes); those shorter than ``MIN_SECRET_BYTES`` and duplicates
    are ignored. :meth:`feed` returns the masked bytes that are final so far;
    :meth:`flush` returns the rest at the end of the stream. ``held`` is the number of bytes
    held back (never more than the longest value's length minus one).
    """

    def __init__(self, secrets: list[bytes]) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_BYTES},
                              key=len, reverse=True)
        self.longest = len(self.secrets[0]) if self.secrets else 0
        self._buf = b""

    @property
    def held(self) -> int:
        """Bytes held back until more output (or the end) shows whether a value starts there."""
        return len(self._buf)

    def feed(self, data: bytes) -> bytes:
        """Mask ``data`` following what was fed before; returns the bytes now final."""
        if not self.secrets:
            return data
        buf = self._buf + data if self._buf else data
        out, rest = self._scan(buf, self._undecided(buf))
        self._buf = rest
        return out

    def flush(self) -> bytes:
        """The end of the stream: mask and return what was held back."""
        out, _ = self._scan(self._buf, len(self._buf))
        self._buf = b""
        return out

    def _undecided(self, buf: bytes) -> int:
        """The first position of ``buf`` where a value may begin but ``buf`` ends before it
        does (``len(buf)`` if none): everything before it can be decided now."""
        for at in range(max(0, len(buf) - self.longest + 1), len(buf)):
            end = buf[at:]
            if any(len(s) > len(end) and s.startswith(end) for s in self.secrets):
                return at
        return len(buf)

    def _scan(self, buf: bytes, safe: int) -> tuple[bytes, bytes]:
        """Mask matches that start before ``safe`` (whether a value starts there is decided
        within ``buf``); returns (final bytes, bytes held back)."""
        parts: list[bytes] = []
        pos = 0
        found = [buf.find(s) for s in self.secrets]  # next occurrence at or after pos
        while pos < safe:
            best = -1
            for index, secret in enumerate(self.secrets):
                at = found[index]
                if 0 <= at < pos:
                    at = found[index] = buf.find(secret, pos)
                if at >= 0 and (best < 0 or at < found[best]):
                    best = index  # longest first: an equal start keeps the longer value
            if best < 0 or found[best] >= safe:
                break
            start = found[best]
            parts.append(buf[pos:start])
            parts.append(MASK)
            pos = start + len(self.secrets[best])
        cut = max(pos, safe)
        parts.append(buf[pos:cut])
        return b"".join(parts), buf[cut:]
