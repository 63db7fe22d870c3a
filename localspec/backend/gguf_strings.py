"""A GGUF string array (a vocabulary: up to 262k entries, each after its 8-byte length) read in
place and walked in vectorised form, not entry by entry in Python."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np


class Corrupt(Exception):
    """The file is not what its own header says (caught by gguf_file.py's reader)."""


@dataclass(frozen=True)
class StringArray:
    """A GGUF string array in place: where each entry's bytes lie in the file."""

    data: np.ndarray  # the whole file's bytes (a memory map)
    starts: np.ndarray  # the offset of each entry's text
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def encoded(self, first: int, last: int) -> bytes:
        """Entries first..last-1 as the file holds them (each after its 8-byte length)."""
        if first >= last:
            return b""
        return self.data[self.starts[first] - 8 : self.starts[last - 1] + self.lengths[last - 1]].tobytes()

    def text(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.starts[i] + self.lengths[i]].tobytes()

    def joined(self, separator: int = 0) -> bytes:
        """Every entry followed by `separator`, concatenated."""
        lengths = self.lengths
        owner = np.repeat(np.arange(len(self), dtype=np.int64), lengths)  # the entry of each text byte
        byte = np.arange(len(owner), dtype=np.int64)  # its place among all the texts' bytes
        out = np.full(len(owner) + len(self), separator, dtype=np.uint8)
        out[byte + owner] = self.data[byte + np.repeat(self.starts - (np.cumsum(lengths) - lengths), lengths)]
        return out.tobytes()


def string_array(data: np.ndarray, pos: int, n: int) -> tuple[StringArray, int]:
    """The n strings from `pos` on, and where they end.

    Each entry is an 8-byte little-endian length, then that many bytes. Token texts hold no zero
    bytes, so a length field of 1..255 is the only place where a non-zero byte is followed by seven
    zeros: every such place is a candidate entry, and a run of candidates each of which ends where
    the next begins is verified link by link from a known start. Entries that break a run (an
    empty or a long text) are stepped over one at a time."""
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    size, done, first = len(data), 0, pos
    while done < n:
        per_entry = (pos - first) / done if done else 16.0  # bytes an entry took so far
        window = data[pos : min(size, pos + (1 << 16) + int((n - done) * per_entry * 1.25))]
        if len(window) < 8:
            raise Corrupt
        zero = window == 0
        two = zero[:-1] & zero[1:]
        four = two[:-2] & two[2:]
        seven = four[:-3] & four[3:]  # zeros at j..j+6
        cand = np.flatnonzero(~zero[: len(seven) - 1] & seven[1:]) + pos
        ends = cand + 8 + data[cand]
        breaks = np.flatnonzero(np.append(ends[:-1] != cand[1:], True))
        limit = pos + len(window) - 8  # a length field starting later is not wholly in the window
        while done < n and pos <= limit:
            k = int(np.searchsorted(cand, pos))
            if k < len(cand) and cand[k] == pos:
                last = min(int(breaks[np.searchsorted(breaks, k)]), k + n - done - 1)
                count = last + 1 - k
                starts[done : done + count] = cand[k : last + 1] + 8
                lengths[done : done + count] = ends[k : last + 1] - cand[k : last + 1] - 8
                done, pos = done + count, int(ends[last])
            else:
                (length,) = struct.unpack_from("<Q", data, pos)
                starts[done], lengths[done] = pos + 8, length
                done, pos = done + 1, pos + 8 + length
            if pos > size:
                raise Corrupt
    return StringArray(data, starts, lengths), pos
