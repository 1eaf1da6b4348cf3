"""Progress of long commands (ingest, derive, check) on stderr.

On a terminal the library draws its own progress bar (tqdm), as before.  When
stderr is a file or a pipe (a log, CI, ``2>log``) a bar is useless, and a long
ingest used to print nothing for minutes; there this prints a plain line every
``interval`` seconds (``ctxrelay: ingest: 1 file (773 KB), 40 s elapsed``) and
a last line when the work ends.  The status comes from the command (what it
knows: sessions done, files given); the timer runs on its own thread, which
janus lets run while Prolog works.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

DEFAULT_INTERVAL = 10.0


def elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s"


class Progress:
    """A context manager; ``with Progress("check", enabled=..., interval=...) as p:``.

    ``p.bar`` says whether to ask the library for its terminal bar;
    ``p.status(text)`` sets what the next line says.  With ``interval`` 0 every
    status change prints a line at once (and no timer runs).
    """

    def __init__(self, what: str, *, enabled: bool = True, interval: float = DEFAULT_INTERVAL,
                 stream: TextIO | None = None) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = enabled and tty
        self.lines = enabled and not tty
        self.interval = interval
        self._status = "started"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._printed = 0
        self._start = 0.0

    def __enter__(self) -> "Progress":
        self._start = time.monotonic()
        if self.lines and self.interval > 0:
            self._thread = threading.Thread(target=self._tick, name="ctxrelay-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lines and self._printed:
            took = elapsed(time.monotonic() - self._start)
            self._line(f"failed after {took}" if exc_type else f"done in {took}: {self._status}")

    def status(self, text: str) -> None:
        with self._lock:
            self._status = text
        if self.lines and self.interval == 0:
            self._line(text)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                status = self._status
            self._line(f"{status}, {elapsed(time.monotonic() - self._start)} elapsed")

    def _line(self, text: str) -> None:
        with self._lock:
            self._printed += 1
            try:
                self.stream.write(f"ctxrelay: {self.what}: {text}\n")
                self.stream.flush()
            except (OSError, ValueError):    # stderr closed under us: progress is optional
                pass
