"""The durable journal writer: append with group commit, rotation, release, stats."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

from journal.errors import (
    JournalClosedError,
    JournalError,
    JournalFullError,
    JournalRecordTooLargeError,
)
from journal.format import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MAX_PAYLOAD,
    SEAL_FRAME_SIZE,
    Position,
    Seal,
    frame_ops,
)
from journal.reader import read_records
from journal.records import Op
from journal.resumption import Resumption, resume
from journal.segments import DirectoryLock, create_segment, remove_segments, segment_path
from journal.stats import JournalStats
from journal.sync_policy import SyncPolicy

__all__ = ["DEFAULT_SEGMENT_SIZE", "Journal", "JournalStats", "SyncPolicy"]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_SIZE = 64 * 1024 * 1024
MIN_SEGMENT_SIZE = 4096
#: Zero-filled space kept ahead of the writes in the active segment.
PREALLOCATE_BYTES = 1024 * 1024


class Journal:
    """An open, locked journal directory. Create with :meth:`Journal.open`.

    Thread-safe. If a write or sync fails with an I/O error, the journal enters a failed
    state (after a failed fsync the page cache cannot be trusted) and every later call
    raises; restart the process so recovery re-reads the log. Running out of disk space is
    the exception: the partial record is cut off again and :class:`JournalFullError` raised.
    """

    def __init__(
        self,
        directory: Path,
        *,
        lock: DirectoryLock,
        at: Resumption,
        segment_size: int,
        policy: SyncPolicy,
    ) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.sync_policy = policy
        self.recovery_report = at.report
        self._dir_lock = lock
        self._fd = at.fd
        self._segment = segment = at.segment
        self._offset = offset = at.offset
        self._seg_records = at.records  # records in the active segment, for its seal
        self._sealed = at.sealed
        self._starts = at.starts  # where the records of each segment kept start
        self._written = self._durable = Position(segment, offset)
        self._allocated = offset  # the file's size: written records plus zeroed space
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._syncing = False
        self._closed = False
        self._failure: BaseException | None = None
        self._records = self._bytes = self._fsyncs = 0
        self._flusher: threading.Thread | None = None
        if policy.mode == "batch":
            self._flusher = threading.Thread(
                target=self._flush_loop, name=f"journal-flusher:{directory}", daemon=True
            )
            self._flusher.start()

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        sync_policy: SyncPolicy | str = "always",
    ) -> Journal:
        """Open (creating it if needed) and lock the journal in ``directory``.

        Validates the whole log: a torn tail is truncated (see ``recovery_report``), any
        other damage raises :class:`JournalCorruptError`. Raises :class:`JournalLockedError`
        if another process or open journal holds the directory.
        """
        path = Path(directory)
        policy = SyncPolicy.parse(sync_policy) if isinstance(sync_policy, str) else sync_policy
        if segment_size < MIN_SEGMENT_SIZE:
            raise ValueError(f"journal segment size must be at least {MIN_SEGMENT_SIZE} bytes")
        path.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(path).acquire()
        try:
            at = resume(path)
        except BaseException:
            lock.release()
            raise
        if policy.mode == "never":
            log.warning(
                "journal %s opened with sync policy 'never': for tests/benchmarks only; "
                "acknowledged writes can be lost on a crash",
                path,
            )
        return cls(
            path,
            lock=lock,
            at=at,
            segment_size=segment_size,
            policy=policy,
        )

    # -- appending ---------------------------------------------------------------------

    def append(
        self, ops: Sequence[Op], *, on_written: Callable[[], None] | None = None
    ) -> Position:
        """Append one atomic record holding ``ops``; return its end position.

        Returns once the record is durable according to the sync policy. If it raises, the
        record was not acknowledged (after a failure it may still be found by recovery).
        ``on_written`` runs once the record is written, before any later record is: the
        appends of several threads are ordered there exactly as in the log.
        """
        return self.append_many([ops], on_written=on_written)[-1]

    def append_many(
        self,
        batches: Sequence[Sequence[Op]],
        *,
        on_written: Callable[[], None] | None = None,
    ) -> list[Position]:
        """Append several records (each atomic on its own) with at most one wait for a sync.

        Returns the end position of each record, in order. ``on_written`` as for
        :meth:`append`, once all of them are written.
        """
        if not batches:
            return []
        frames = []
        for ops in batches:
            if not ops:
                raise ValueError("a journal record needs at least one operation")
            frame = frame_ops(ops)
            if len(frame) - FRAME_OVERHEAD > MAX_PAYLOAD:
                raise JournalRecordTooLargeError(
                    f"journal record of {len(frame)} bytes exceeds the {MAX_PAYLOAD} byte limit"
                )
            frames.append(frame)
        with self._cond:
            ends = self._write_locked(frames)
            if on_written is not None:
                on_written()
            if self.sync_policy.mode == "always":
                self._wait_durable_locked(ends[-1])
        return ends

    def sync(self) -> Position:
        """Make everything written so far durable, whatever the sync policy; its end."""
        with self._cond:
            self._check_usable_locked()
            end = self._written
            self._wait_durable_locked(end)
            return end

    def _check_usable_locked(self) -> None:
        if self._failure is not None:
            raise JournalError(
                f"journal {self.directory} failed earlier ({self._failure}); restart so "
                f"recovery can re-read the log"
            ) from self._failure
        if self._closed:
            raise JournalClosedError(f"journal {self.directory} is closed")

    def _write_locked(self, frames: list[bytes]) -> list[Position]:
        """Write frames in order, rotating segments as needed; returns end positions."""
        self._check_usable_locked()
        ends: list[Position] = []
        pending: list[bytes] = []
        pending_len = 0
        for frame in frames:
            at = self._offset + pending_len
            if at > self._starts[self._segment] and at + len(frame) > self.segment_size:
                self._pwrite_locked(pending, pending_len)
                pending, pending_len = [], 0
                self._make_room_locked(len(frame))
            pending.append(frame)
            pending_len += len(frame)
            ends.append(Position(self._segment, self._offset + pending_len))
        self._pwrite_locked(pending, pending_len)
        return ends

    def _pwrite_locked(self, pending: list[bytes], length: int) -> None:
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        start = self._offset
        if start + length > self._allocated:
            self._allocate_locked(start + length)
        try:
            done = 0
            while done < length:
                done += os.pwrite(self._fd, memoryview(data)[done:], start + done)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            try:
                os.ftruncate(self._fd, start)
                self._allocated = start  # the zeroed space ahead went with it
            except OSError:
                full = False
            if not full:
                # An I/O error may also have cost earlier writes not yet synced, which a
                # later fsync would then report durable: nothing more is acknowledged.
                self._fail_locked(exc)
                raise JournalError(f"journal {self.directory}: write failed: {exc}") from exc
            raise JournalFullError(
                f"no space left on the device of journal {self.directory}; free space, "
                f"the record was not written"
            ) from exc
        self._offset = start + length
        self._written = Position(self._segment, self._offset)
        self._records += len(pending)
        self._seg_records += len(pending)
        self._bytes += length

    def _allocate_locked(self, need: int) -> None:
        """Zero-fill the segment up to ``need`` or beyond and make its new size durable.

        Records are written only into room made so: neither a killed process nor a power
        loss leaves the file ending inside a record, so a file that does was cut short
        since, and readers refuse it instead of taking it for a torn write. Overwriting
        allocated blocks also lets fdatasync flush data only, instead of the file size and
        block map with every record. Readers treat the zeros after the last record as free
        space; sealed segments are trimmed. With no room even for ``need``, the zeros are
        cut off again and :class:`JournalFullError` raised: nothing was written.
        """
        start = self._allocated
        ahead = min(max(self.segment_size, need), need + PREALLOCATE_BYTES)
        for end in dict.fromkeys((ahead, need)):
            try:
                zeros = memoryview(bytes(end - start))
                done = 0
                while done < len(zeros):
                    done += os.pwrite(self._fd, zeros[done:], start + done)
            except OSError as exc:
                try:
                    os.ftruncate(self._fd, start)
                except OSError:
                    pass
                else:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        continue
                self._fail_locked(exc)
                raise JournalError(f"journal {self.directory}: write failed: {exc}") from exc
            if self.sync_policy.mode != "never":  # that one promises nothing on a crash
                try:
                    os.fdatasync(self._fd)  # the new size too: needed to read the data
                except OSError as exc:
                    self._fail_locked(exc)
                    raise JournalError(f"journal {self.directory}: fsync failed: {exc}") from exc
                self._fsyncs += 1
            self._allocated = end
            return
        raise JournalFullError(
            f"no space left on the device of journal {self.directory}; free space, "
            f"the record was not written"
        )

    def _trim_locked(self) -> bool:
        """Cut the active segment's preallocated tail (the caller syncs); True if it did."""
        if self._allocated <= self._offset:
            return False
        os.ftruncate(self._fd, self._offset)
        self._allocated = self._offset
        return True

    def _make_room_locked(self, size: int) -> None:
        """Rotate to a new segment unless another thread did while we waited.

        The active segment is trimmed and synced first; the next one starts with its seal,
        written and synced with the new header (no sync of its own). A crash before that
        sync leaves the new segment without a valid seal and record: it is taken for a
        torn creation and removed on open, and the sealed one, whole, is written on.
        """
        while (
            self._offset > self._starts[self._segment] and self._offset + size > self.segment_size
        ):
            self._check_usable_locked()
            if self._syncing:
                self._cond.wait()
                continue
            trimmed = self._trim_locked()
            if self._durable < self._written or trimmed:
                self._sync_locked(hold_lock=True)
            # The next segment first: with no room for it (JournalFullError) the active one
            # stays open and in use, and records that still fit in it go on being written.
            seal = Seal(self._segment, self._offset, self._seg_records)
            try:
                fd = create_segment(self.directory, self._segment + 1, seal)
            except JournalFullError:
                raise
            except OSError as exc:
                self._fail_locked(exc)
                raise JournalError(f"journal {self.directory}: rotation failed: {exc}") from exc
            os.close(self._fd)
            self._fd = fd
            self._sealed[self._segment] = self._offset
            self._segment += 1
            self._offset = self._allocated = HEADER_SIZE + SEAL_FRAME_SIZE
            self._starts[self._segment] = self._offset
            self._seg_records = 0
            self._written = self._durable = Position(self._segment, self._offset)

    # -- syncing -------------------------------------------------------------------------

    def _wait_durable_locked(self, end: Position) -> None:
        """Group commit: one thread syncs for every record written so far, others wait."""
        while True:
            if self._failure is not None:
                self._check_usable_locked()
            if self._durable >= end:
                return
            if self._syncing:
                self._cond.wait()
            else:
                self._sync_locked(hold_lock=False)

    def _sync_locked(self, *, hold_lock: bool) -> None:
        """fdatasync everything written so far; the caller holds the lock, not syncing."""
        self._syncing = True
        target, fd = self._written, self._fd
        error: OSError | None = None
        what = "fsync failed"
        if not hold_lock:
            self._lock.release()
        try:
            os.fdatasync(fd)
            if os.fstat(fd).st_nlink == 0:  # synced into a file no restart can find
                what = "its active segment was deleted while in use (the directory removed?)"
                error = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        except OSError as exc:
            error = exc
        finally:
            if not hold_lock:
                self._lock.acquire()
            self._syncing = False
        if error is not None:
            self._fail_locked(error)
            raise JournalError(f"journal {self.directory}: {what}: {error}") from error
        self._fsyncs += 1
        self._durable = max(self._durable, target)
        self._cond.notify_all()

    def _fail_locked(self, exc: BaseException) -> None:
        log.error("journal %s failed: %s", self.directory, exc)
        self._failure = exc
        self._cond.notify_all()

    def _flush_loop(self) -> None:
        interval = self.sync_policy.interval_ms / 1000.0
        deadline = time.monotonic() + interval
        with self._cond:
            while not self._closed and self._failure is None:
                now = time.monotonic()
                if now < deadline:
                    self._cond.wait(deadline - now)
                    continue
                deadline = now + interval
                if self._durable < self._written and not self._syncing:
                    try:
                        self._sync_locked(hold_lock=False)
                    except JournalError:
                        return

    # -- reading and releasing ---------------------------------------------------------------

    def recover(self, after: Position | None = None) -> Iterator[tuple[Position, list[Op]]]:
        """Yield ``(end_position, ops)`` of every record ending after ``after``, in order.

        ``after`` is an end position returned by ``append`` (typically the one stored with
        the last checkpoint) or ``None`` for the whole log. Records appended after this call
        are not included.
        """
        with self._lock:
            self._check_usable_locked()
            until = self._written
        return read_records(self.directory, after, until)

    def release(self, position: Position, archive_dir: Path | None = None) -> list[Path]:
        """Delete (or move to ``archive_dir``) segments wholly behind ``position``.

        Segments numbered below ``position.segment`` go; the segment holding ``position``
        and the active segment stay, so ``recover(position)`` keeps working. Returns the
        removed paths (oldest first, so a crash in between leaves no gap).
        """
        with self._lock:
            self._check_usable_locked()
            numbers = sorted(n for n in self._sealed if n < position.segment)
            for number in numbers:
                del self._sealed[number]
                del self._starts[number]
        paths = [segment_path(self.directory, n) for n in numbers]
        remove_segments(paths, archive_dir)
        return paths

    # -- state -------------------------------------------------------------------------------

    @property
    def position(self) -> Position:
        """End of the last written record (where the next one starts)."""
        with self._lock:
            return self._written

    @property
    def durable_position(self) -> Position:
        """End of the last record known to be on stable storage."""
        with self._lock:
            return self._durable

    @property
    def start_position(self) -> Position:
        """Start of the oldest retained segment's records (after its header and seal): a
        log holds records when its position is past this."""
        with self._lock:
            oldest = min(self._sealed, default=self._segment)
            return Position(oldest, self._starts[oldest])

    @property
    def bytes_on_disk(self) -> int:
        """What the log's segments take on disk now (preallocated space included)."""
        with self._lock:
            return sum(self._sealed.values()) + self._allocated

    def stats(self) -> JournalStats:
        """Counters since open and the current size of the log."""
        with self._lock:
            return JournalStats(
                records_appended=self._records,
                bytes_appended=self._bytes,
                fsyncs=self._fsyncs,
                position=self._written,
                durable_position=self._durable,
                segments=len(self._sealed) + 1,
                bytes_on_disk=sum(self._sealed.values()) + self._allocated,
                sync_policy=str(self.sync_policy),
            )

    def close(self) -> None:
        """Sync everything written, stop the flusher and release the directory lock."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._syncing:
                self._cond.wait()
            try:
                trimmed = self._failure is None and self._trim_locked()
                if self._failure is None and (self._durable < self._written or trimmed):
                    self._sync_locked(hold_lock=True)
            finally:
                self._cond.notify_all()
        try:
            if self._flusher is not None:
                self._flusher.join()
        finally:
            with self._lock:
                os.close(self._fd)
            self._dir_lock.release()

    @property
    def failed(self) -> bool:
        """Whether a write, sync or rotation failed: no later call can use the log."""
        return self._failure is not None

    @property
    def failure(self) -> BaseException | None:
        """What made the log fail, once it did."""
        return self._failure

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
