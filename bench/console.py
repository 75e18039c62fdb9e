"""The simulator's terminal: a live progress line, and messages that never land inside it.

On a terminal the progress of a strategy is one line redrawn in place
(``\\r``, no newline). Anything else printed meanwhile (a log record of
this process, a line a host process wrote) first ends that line with a
newline, so a message never shares a line with progress text; the next
update draws the progress line afresh below it. Off a terminal every
progress update is a line of its own, every few seconds.

Every write goes through :func:`click.echo`, resolved at call time, so the
console follows whatever stdout and stderr are when it writes (click's test
runner swaps them). Writes are serialised: host processes' output is
relayed from reader threads.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import click

#: the loggers whose records the console shows while a run is on (the library's)
LOGGER = "governor"


def _is_tty() -> bool:
    return sys.stdout.isatty()


class Console:
    """Progress and messages on one terminal, never on the same line."""

    def __init__(self, live: bool | None = None) -> None:
        #: redraw progress in place (a terminal) rather than print a line per update
        self.live = _is_tty() if live is None else live
        self._shown = False  # a live progress line is on screen, without its newline
        self._lock = threading.RLock()

    @property
    def width(self) -> int:
        """Columns a live line may use without wrapping (a wrapped line cannot be redrawn)."""
        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

    def progress(self, text: str) -> None:
        """Show ``text`` as the current progress: in place when live, else as a line."""
        with self._lock:
            if self.live:
                click.echo("\r" + text[: self.width].ljust(self.width), nl=False)
                sys.stdout.flush()
                self._shown = True
            else:
                click.echo(text)

    def line(self, text: str = "", err: bool = False) -> None:
        """Print a line of its own: any live progress line is ended first."""
        with self._lock:
            self._end()
            click.echo(text, err=err)

    def message(self, text: str) -> None:
        """A message for the user (a warning, a host's output), on stderr."""
        self.line(text, err=True)

    def _end(self) -> None:
        if self._shown:
            click.echo("")
            self._shown = False

    @contextmanager
    def showing_logs(self, level: int = logging.WARNING) -> Iterator[None]:
        """While the block runs, the library's log records of ``level`` and
        above are printed by this console (never into a progress line)."""
        handler = ConsoleHandler(self, level)
        logger = logging.getLogger(LOGGER)
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            with self._lock:
                self._end()


class ConsoleHandler(logging.Handler):
    """A logging handler that prints through a :class:`Console`."""

    def __init__(self, console: Console, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.console = console

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        return text

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.message(self.format(record))
        except Exception:  # noqa: BLE001 - a log record must never break the run
            self.handleError(record)
