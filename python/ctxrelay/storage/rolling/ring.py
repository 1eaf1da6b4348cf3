"""One session's ring file: the on-disk format (see the package doc) and its
memory-mapped reader and writer, crash-safe by the order of its writes."""
from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import zlib
from pathlib import Path

from ctxrelay.storage.rolling.common import (MAX_CAPACITY_BYTES, MAX_SESSION_ID_BYTES,
                                             CorruptRingError, LogRecord, RingStats, decode,
                                             too_large)

__all__ = ["Ring", "FORMAT_VERSION", "SUFFIX", "SLOT_SIZE", "file_name", "header_len",
           "file_size", "build_header", "head_slot"]

FORMAT_VERSION = 1
_MAGIC = b"CTXRRING"
SUFFIX = ".ring"
_FIXED = struct.Struct("<8sIIQQ32sI")    # 68 bytes, then the header CRC at 68
_ID_AT = 72
SLOT_SIZE = 64                          # one head slot
_HEAD_BODY = struct.Struct("<QQQQ")      # generation, next_seq, count, write_pos
_HEAD = struct.Struct("<QQQQI")
_INDEX = struct.Struct("<QQIB3xI4x")     # seq, offset, length, kind, crc
_INDEX_META = struct.Struct("<QQIB")
_INDEX_SIZE = _INDEX.size                # 32
_PAGE = mmap.PAGESIZE



def file_name(raw_id: bytes) -> str:
    return hashlib.sha256(raw_id).hexdigest() + SUFFIX


def header_len(id_len: int) -> int:
    return (_ID_AT + id_len + 63) // 64 * 64


def file_size(header_len: int, capacity_entries: int, capacity_bytes: int) -> int:
    return header_len + 2 * SLOT_SIZE + capacity_entries * _INDEX_SIZE + capacity_bytes


def build_header(raw_id: bytes, capacity_entries: int, capacity_bytes: int) -> bytes:
    hlen = header_len(len(raw_id))
    fixed = _FIXED.pack(_MAGIC, FORMAT_VERSION, hlen, capacity_entries, capacity_bytes,
                        hashlib.sha256(raw_id).digest(), len(raw_id))
    crc = zlib.crc32(raw_id, zlib.crc32(fixed))
    header = fixed + crc.to_bytes(4, "little") + raw_id
    return header + bytes(hlen - len(header))


def head_slot(gen: int, next_seq: int, count: int, write_pos: int) -> bytes:
    body = _HEAD_BODY.pack(gen, next_seq, count, write_pos)
    return body + zlib.crc32(body).to_bytes(4, "little")


# -- one session's ring ----------------------------------------------------------

class Ring:
    """One mapped ring file.  Callers hold the RollingLog lock; this takes the flock."""

    __slots__ = ("path", "session_id", "raw_id", "fd", "mm", "cap_entries", "cap_bytes",
                 "head_at", "index_at", "data_at", "size", "writable")

    def __init__(self, path: Path, *, raw_id: bytes | None, writable: bool) -> None:
        self.path = path
        self.writable = writable
        flags = os.O_RDWR if writable else os.O_RDONLY
        self.fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
        self.mm: mmap.mmap | None = None
        try:
            self._validate(raw_id)
        except BaseException:
            self.close()
            raise

    def _corrupt(self, what: str) -> CorruptRingError:
        return CorruptRingError(
            f"rolling log file {self.path} is corrupt: {what}. The file was left "
            "untouched; move it aside to keep it for inspection (a new ring is created "
            "on the next append) or delete it to discard the session's recent context")

    def _validate(self, raw_id: bytes | None) -> None:
        size = os.fstat(self.fd).st_size
        if size < _ID_AT:
            raise self._corrupt(f"{size} bytes, shorter than the {_ID_AT}-byte header")
        head = os.pread(self.fd, _ID_AT, 0)
        magic, version, hlen, cap_n, cap_b, id_hash, id_len = _FIXED.unpack_from(head)
        if magic != _MAGIC:
            raise self._corrupt(f"bad magic {magic!r} (expected {_MAGIC!r}); it is not "
                                "a ctxrelay rolling log")
        if version != FORMAT_VERSION:
            raise self._corrupt(f"format version {version}, this ctxrelay reads "
                                f"version {FORMAT_VERSION}")
        if id_len > MAX_SESSION_ID_BYTES or hlen != header_len(id_len) or hlen > size:
            raise self._corrupt(f"inconsistent header (length {hlen}, id length {id_len})")
        stored_id = os.pread(self.fd, id_len, _ID_AT)
        crc = int.from_bytes(head[68:72], "little")
        if zlib.crc32(stored_id, zlib.crc32(head[:68])) != crc:
            raise self._corrupt("header checksum mismatch")
        if hashlib.sha256(stored_id).digest() != id_hash:
            raise self._corrupt("session id does not match its hash")
        if raw_id is not None and stored_id != raw_id:
            raise self._corrupt("it belongs to another session id")
        if self.path.name != file_name(stored_id):
            raise self._corrupt("its name is not the hash of its session id (renamed?)")
        if not (1 <= cap_n and 1 <= cap_b <= MAX_CAPACITY_BYTES):
            raise self._corrupt(f"capacities out of range ({cap_n} entries, {cap_b} bytes)")
        expected = file_size(hlen, cap_n, cap_b)
        if size != expected:
            raise self._corrupt(f"{size} bytes, expected {expected} for its capacities "
                                "(truncated or extended)")
        self.raw_id = stored_id
        self.session_id = stored_id.decode("utf-8", "surrogatepass")
        self.cap_entries = cap_n
        self.cap_bytes = cap_b
        self.head_at = hlen
        self.index_at = hlen + 2 * SLOT_SIZE
        self.data_at = self.index_at + cap_n * _INDEX_SIZE
        self.size = size
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        self.mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, prot)
        with self._locked(fcntl.LOCK_SH):
            gen, next_seq, count, write_pos = self.head()
            if count > cap_n or count >= next_seq:
                raise self._corrupt(f"head holds {count} entries (capacity {cap_n}, "
                                    f"next seq {next_seq})")
            if count and write_pos - self._slot(next_seq - count)[1] > cap_b:
                raise self._corrupt("head spans more bytes than the ring holds")

    # locking -----------------------------------------------------------------

    def _locked(self, op: int) -> "_Flock":
        return _Flock(self.fd, op)

    # head and index --------------------------------------------------------------

    def head(self) -> tuple[int, int, int, int]:
        """The valid head slot with the larger generation.

        A slot whose CRC field is zero is unused or being published (see
        :meth:`_publish`) and is skipped; one whose nonzero CRC fails was damaged
        on disk.  The older slot is then no safe answer (it would miss the
        newest append), so the ring is refused: it only holds copies of recent
        turns, and a Runtime rebuilds it from the transcript (issue 15).
        """
        mm = self.mm
        best = None
        for slot, at in enumerate((self.head_at, self.head_at + SLOT_SIZE)):
            gen, next_seq, count, write_pos, crc = _HEAD.unpack_from(mm, at)
            if gen and zlib.crc32(mm[at:at + 32]) == crc:
                if best is None or gen > best[0]:
                    best = (gen, next_seq, count, write_pos)
            elif crc:
                raise self._corrupt(
                    f"head slot {slot} fails its checksum (damaged on disk), so which "
                    "entries the ring holds is unknown. The ring only keeps copies of the "
                    "session's recent turns: a Runtime rebuilds it from the transcript on "
                    "its next read or append of the session")
        if best is None:
            raise self._corrupt("neither head slot is valid")
        return best

    def _publish(self, gen: int, next_seq: int, count: int, write_pos: int) -> None:
        # Three stores, so a publish cut short is told apart from damage on disk:
        # the CRC field is zeroed first (an aligned 4-byte store, which does not
        # tear), then the body, then the CRC.  A slot read with a zero CRC is one
        # being written and the other slot is the head; a nonzero CRC that fails
        # is damage (see head()).
        at = self.head_at + (gen & 1) * SLOT_SIZE
        slot = head_slot(gen, next_seq, count, write_pos)
        self._write(at + 32, bytes(4))
        self._write(at, slot[:32])
        self._write(at + 32, slot[32:])

    def _write(self, at: int, data: bytes) -> None:
        """Every store into the file goes through here (the crash tests hook it)."""
        self.mm[at:at + len(data)] = data

    def _slot(self, seq: int) -> tuple[int, int, int, int, int]:
        return _INDEX.unpack_from(self.mm, self.index_at + (seq % self.cap_entries) * _INDEX_SIZE)

    def _flush(self, start: int, end: int) -> None:
        aligned = start - start % _PAGE
        self.mm.flush(aligned, end - aligned)

    # operations ---------------------------------------------------------------------

    def append(self, kind: int, payload: bytes, *, sync: bool) -> int:
        size = len(payload)
        cap_n, cap_b = self.cap_entries, self.cap_bytes
        if size > cap_b:
            raise too_large(size, cap_b)
        with self._locked(fcntl.LOCK_EX):
            gen, next_seq, count, write_pos = self.head()
            first = next_seq - count
            start = self._slot(first)[1] if count else write_pos
            dropped = 0
            while count and (count >= cap_n or write_pos + size - start > cap_b):
                first += 1
                count -= 1
                dropped += 1
                start = self._slot(first)[1] if count else write_pos
            if dropped:                       # never overwrite what a published head names
                gen += 1
                self._publish(gen, next_seq, count, write_pos)
                if sync:
                    self._flush(self.head_at, self.head_at + 2 * SLOT_SIZE)
            data_at = self.data_at
            phys = write_pos % cap_b
            end = phys + size
            if end <= cap_b:
                self._write(data_at + phys, payload)
            else:
                split = cap_b - phys
                self._write(data_at + phys, payload[:split])
                self._write(data_at, payload[split:])
            seq = next_seq
            meta = _INDEX_META.pack(seq, write_pos, size, kind)
            crc = zlib.crc32(payload, zlib.crc32(meta))
            slot_at = self.index_at + (seq % cap_n) * _INDEX_SIZE
            self._write(slot_at, _INDEX.pack(seq, write_pos, size, kind, crc))
            if sync:
                if end <= cap_b:
                    self._flush(data_at + phys, data_at + end)
                else:
                    self._flush(data_at + phys, data_at + cap_b)
                    self._flush(data_at, data_at + end - cap_b)
                self._flush(slot_at, slot_at + _INDEX_SIZE)
            self._publish(gen + 1, next_seq + 1, count + 1, write_pos + size)
            if sync:
                self._flush(self.head_at, self.head_at + 2 * SLOT_SIZE)
            return seq

    def read(self, n: int, with_seq: bool) -> list:
        with self._locked(fcntl.LOCK_SH):
            _gen, next_seq, count, _write_pos = self.head()
            take = n if n < count else count
            mm, data_at, cap_n, cap_b = self.mm, self.data_at, self.cap_entries, self.cap_bytes
            index_at = self.index_at
            out = []
            for seq in range(next_seq - take, next_seq):
                slot_seq, offset, size, kind, crc = _INDEX.unpack_from(
                    mm, index_at + (seq % cap_n) * _INDEX_SIZE)
                phys = offset % cap_b
                end = phys + size
                if end <= cap_b:
                    payload = mm[data_at + phys:data_at + end]
                else:
                    payload = mm[data_at + phys:data_at + cap_b] + mm[data_at:data_at + end - cap_b]
                if slot_seq != seq or zlib.crc32(
                        payload, zlib.crc32(_INDEX_META.pack(slot_seq, offset, size, kind))) != crc:
                    raise self._corrupt(f"entry {seq} fails its checksum")
                try:
                    entry = decode(kind, payload)
                except (UnicodeDecodeError, ValueError):
                    raise self._corrupt(f"entry {seq} cannot be decoded") from None
                out.append(LogRecord(seq, entry) if with_seq else entry)
            return out

    def roll_off(self, n: int, *, sync: bool) -> int:
        with self._locked(fcntl.LOCK_EX):
            gen, next_seq, count, write_pos = self.head()
            drop = n if n < count else count
            if drop:
                self._publish(gen + 1, next_seq, count - drop, write_pos)
                if sync:
                    self._flush(self.head_at, self.head_at + 2 * SLOT_SIZE)
            return drop

    def stats(self) -> RingStats:
        with self._locked(fcntl.LOCK_SH):
            _gen, next_seq, count, write_pos = self.head()
            used = write_pos - self._slot(next_seq - count)[1] if count else 0
        return RingStats(
            session_id=self.session_id, entries=count, bytes_used=used,
            capacity_entries=self.cap_entries, capacity_bytes=self.cap_bytes,
            first_seq=next_seq - count if count else None,
            last_seq=next_seq - 1 if count else None, next_seq=next_seq,
            file_bytes=self.size)

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Flock:
    __slots__ = ("fd", "op")

    def __init__(self, fd: int, op: int) -> None:
        self.fd = fd
        self.op = op

    def __enter__(self) -> None:
        fcntl.flock(self.fd, self.op)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
