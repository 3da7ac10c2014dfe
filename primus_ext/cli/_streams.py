"""The standard streams of a command, guarded: a reader that leaves, a full disk or a closed stream ends no command
with a traceback.

    out, err = Guarded(sys.stdout, "standard output"), Guarded(sys.stderr, "standard error")
    ... the command runs, printing through them (its progress thread too) ...
    code = stream_exit(code, out, err)   # STREAM_FAILED when a stream refused what was written to it

Text written through them shows any value taken from the environment as its template (``errors.redact``).
``BrokenPipeError`` (``primus-ext validate ... | head``) silences the stream and costs nothing: the reader wanted no
more. Any other ``OSError`` (``> /dev/full``: ENOSPC, EIO, a stream closed with ``>&-``) silences it too, the command
finishes (its files are written), and the exit code says the output was lost: ``STREAM_FAILED``, with one line on
standard error when that one still works.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import TextIO

from primus_ext.errors import redact

STREAM_FAILED = 74
"""Exit code when standard output or error refused a write: ``EX_IOERR`` of BSD's sysexits.h ("an error occurred
while doing I/O on some file"); 2 stays the code of bad input."""


class Guarded:
    """``stream`` (``None``: closed) that turns into /dev/null after its first failed write or flush."""

    def __init__(self, stream: TextIO | None, name: str) -> None:
        self._stream = stream
        self.name = name
        self.reader_gone = stream is None
        self.error: OSError | None = None
        """The first write or flush the stream refused (not a reader that left)."""

    @property
    def buffer(self) -> _Binary | None:
        """The binary layer (``--json -``, a PNG to ``-``), guarded alike."""
        raw = getattr(self._stream, "buffer", None)
        return None if raw is None else _Binary(self, raw)

    def write(self, text: str) -> int:
        if self._stream is None:
            if text and self.error is None:
                self.error = OSError(errno.EBADF, "the stream is closed")
            return len(text)
        if not self.reader_gone:
            try:
                self._stream.write(redact(text))
                return len(text)
            except OSError as err:
                self._failed(err)
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone and self._stream is not None:
            try:
                self._stream.flush()
            except OSError as err:
                self._failed(err)

    def _failed(self, err: OSError) -> None:
        if not isinstance(err, BrokenPipeError) and self.error is None:
            self.error = err
        self.reader_gone = True
        try:  # the interpreter's own flush at exit lands in /dev/null
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): nothing to redirect
            pass

    def isatty(self) -> bool:
        try:
            return self._stream is not None and not self.reader_gone and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


class _Binary:
    """A guarded stream's ``buffer``: bytes written through the same guard."""

    def __init__(self, owner: Guarded, raw) -> None:
        self._owner, self._raw = owner, raw

    def write(self, data: bytes) -> int:
        if not self._owner.reader_gone:
            try:
                return self._raw.write(data)
            except OSError as err:
                self._owner._failed(err)
        return len(data)

    def flush(self) -> None:
        if not self._owner.reader_gone:
            try:
                self._raw.flush()
            except OSError as err:
                self._owner._failed(err)


def stream_exit(code: int, *streams: Guarded) -> int:
    """``code``, or ``STREAM_FAILED`` after a line on standard error (when it works) naming the stream that refused a
    write and why."""
    failed = [s for s in streams if s.error is not None]
    if not failed:
        return code
    for stream in failed:
        print(f"error: cannot write to {stream.name}: {stream.error.strerror or stream.error} (its output is lost; "
              "the files the command writes were written)", file=sys.stderr)
    sys.stderr.flush()
    return STREAM_FAILED
