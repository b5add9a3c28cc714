"""Progress of long steps on stderr, so that a command that runs for minutes is never silent.

One :class:`Reporter` per process. The ``moehub`` command configures it from
``-q/--quiet`` (nothing), the default (a line per stage, updates with elapsed time, rate
and ETA) and ``-v/--verbose`` (also sub-steps and log paths, more frequent updates).
Library callers get silence unless they call :func:`configure` (a Python API should not
write to stderr by surprise). Results and tables are not progress: commands print those
on stdout.

On a terminal a stage redraws one line in place; otherwise (a log file, CI, a pipe) it
writes a plain line at most every ``interval`` seconds, so logs stay short. Only the
innermost open stage draws (an RTL simulation inside a co-simulation), the outer one
resumes when it ends. Pure Python, no dependencies, thread-safe (file followers update
stages from a thread).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

QUIET, NORMAL, VERBOSE = 0, 1, 2


def fmt_duration(s: float) -> str:
    """``4.2 s``, ``42 s``, ``3m05s``, ``1h02m``: short enough for one status line."""
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class Reporter:
    """Writes messages and stage lines to ``stream`` (default: ``sys.stderr`` at call time,
    so test capture works) when ``level`` allows. ``tty``/``interval``/``clock`` are
    detected or defaulted; tests pass them explicitly."""

    def __init__(self, level: int = NORMAL, stream=None, tty: Optional[bool] = None,
                 interval: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self.level, self._stream, self._tty = level, stream, tty
        self._interval, self.clock = interval, clock
        self._lock = threading.RLock()
        self._live = None          # the stage whose line is drawn in place (tty only)
        self._stack: list = []     # open stages, innermost last

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stderr

    @property
    def tty(self) -> bool:
        if self._tty is not None:
            return self._tty
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    @property
    def interval(self) -> float:
        """Seconds between two updates of a stage: redraws are cheap on a terminal, lines in
        a log are not."""
        if self._interval is not None:
            return self._interval
        if self.tty:
            return 0.25
        return 5.0 if self.level >= VERBOSE else 30.0

    def message(self, text: str, level: int = NORMAL) -> None:
        """A line of its own (a live stage line is cleared first and redrawn later)."""
        if self.level < level:
            return
        with self._lock:
            self._clear()
            self._write(text + "\n")

    def info(self, text: str) -> None:
        self.message(text, NORMAL)

    def debug(self, text: str) -> None:
        self.message(text, VERBOSE)

    def stage(self, name: str, total: Optional[int] = None, unit: str = "", *, eta: bool = True,
              heartbeat: bool = False, level: int = NORMAL) -> "Stage":
        """A step to report: ``with reporter.stage("synth tiny: Yosys", heartbeat=True):``.
        ``total``/``unit``: a known count (then percentage and ETA, unless ``eta=False``
        because items differ widely in cost); ``heartbeat``: redraw the elapsed time even
        without updates (a tool that reports nothing while it runs)."""
        return Stage(self, name, total, unit, eta, heartbeat, level)

    # -- drawing (called with the lock held) ----------------------------------------------
    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass                  # progress must never break a run (closed or broken stderr)

    def _clear(self) -> None:
        if self._live is not None:
            self._write("\r\033[K")
            self._live = None

    def _draw(self, stage: "Stage", text: str, final: bool = False) -> None:
        with self._lock:
            if self._stack and self._stack[-1] is not stage and not final:
                return            # an inner stage is drawing
            if not self.tty:
                self._write(text + "\n")
                return
            if self._live is not None and self._live is not stage:
                self._write("\n")  # keep the outer stage's last line as a heading
            self._write("\r" + text + "\033[K" + ("\n" if final else ""))
            self._live = None if final else stage


class Stage:
    """One reported step; use as a context manager, call :meth:`update` as work is done."""

    def __init__(self, rep: Reporter, name: str, total, unit: str, eta: bool,
                 heartbeat: bool, level: int):
        self.rep, self.name, self.total, self.unit = rep, name, total, unit
        self.eta, self.heartbeat, self.level = eta, heartbeat, level
        self.done, self.note, self.counters = 0, "", {}
        self.t0 = self._last = None
        self._t_done = self._t_counters = None    # when done / the counters last changed
        self._stop = threading.Event()
        self._ticker = None

    @property
    def active(self) -> bool:
        return self.rep.level >= self.level

    def __enter__(self) -> "Stage":
        self.t0 = self.rep.clock()
        self._last = self.t0
        if not self.active:
            return self
        with self.rep._lock:
            self.rep._stack.append(self)
            self.rep._draw(self, self.text() if self.rep.tty else f"{self.name} ...")
        if self.heartbeat:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        if not self.active:
            return False
        with self.rep._lock:
            if self in self.rep._stack:
                self.rep._stack.remove(self)
            if exc_type is None:
                self.rep._draw(self, self.summary(), final=True)
            elif self.rep._live is self:
                self.rep._clear()   # the error (or "interrupted") is reported once, by main
        return False

    def update(self, done: Optional[int] = None, note: Optional[str] = None,
               force: bool = False, **counters) -> None:
        """Record progress (``done`` of ``total``; a ``note`` such as the current sub-step;
        named ``counters`` whose rate is shown, e.g. ``cycles=``) and redraw if the last
        draw is older than the reporter's interval."""
        now = self.rep.clock()
        if done is not None and done != self.done:
            self.done, self._t_done = done, now
        if note is not None:
            self.note = note
        if counters:
            self.counters.update(counters)
            self._t_counters = now
        if not self.active or self.t0 is None:
            return
        if force or now - self._last >= self.rep.interval:
            self._last = now
            self.rep._draw(self, self.text())

    def advance(self, n: int = 1, note: Optional[str] = None) -> None:
        self.update(self.done + n, note)

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else self.rep.clock() - self.t0

    def _since(self, t) -> float:
        """Seconds from the start to ``t`` (a rate is measured when its value changed,
        not now: between two reports of a subprocess the rate would only fall)."""
        return 0.0 if t is None or self.t0 is None else t - self.t0

    def _counts(self, final: bool = False) -> list:
        parts = []
        if self.total:
            pct = "" if final else f" ({100.0 * self.done / self.total:.0f}%)"
            parts.append(f"{self.done:,}/{self.total:,} {self.unit}".rstrip() + pct)
        elif self.done:
            parts.append(f"{self.done:,} {self.unit}".rstrip())
        el = self._since(self._t_counters)
        for k, v in self.counters.items():
            rate = f" at {v / el:,.0f}/s" if el > 0 and v else ""
            parts.append(f"{v:,} {k}{rate}")
        return parts

    def text(self) -> str:
        """``name: 3/10 runs (30%), 12,288 cycles (1,024/s), elapsed 12 s, ETA 28 s: note``."""
        el = self.elapsed()
        parts = self._counts() + [f"elapsed {fmt_duration(el)}"]
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA {fmt_duration(eta)}")
        return f"{self.name}: " + ", ".join(parts) + (f": {self.note}" if self.note else "")

    def eta_s(self):
        """Seconds left at the mean rate so far, counting down between updates; None when
        unknown (no total, nothing done yet, or ``eta=False``)."""
        t_done = self._since(self._t_done)
        if not (self.eta and self.total and 0 < self.done < self.total and t_done > 0):
            return None
        left = (self.total - self.done) * t_done / self.done
        return max(0.0, left - (self.elapsed() - t_done))

    def summary(self) -> str:
        """The stage's last line: how long it took and what it did."""
        el = self.elapsed()
        counts = self._counts(final=True)
        return f"{self.name}: done in {fmt_duration(el)}" + (f" ({', '.join(counts)})"
                                                             if counts else "")

    def _tick(self) -> None:
        period = max(1.0, self.rep.interval) if self.rep.tty else self.rep.interval
        while not self._stop.wait(period):
            self.update(force=True)


class Follower:
    """Calls ``on_lines(lines)`` with the complete new lines of a growing file, from a
    thread polling every ``period`` seconds, and once more when the ``with`` block ends.
    How a subprocess reports progress to us: a cocotb test or the Verilog player appends
    lines to a file (Icarus, cocotb and Yosys write their own logs, not our stderr)."""

    def __init__(self, path: os.PathLike, on_lines: Callable[[list], None],
                 period: float = 0.5):
        self.path, self.on_lines, self.period = Path(path), on_lines, period
        self._pos, self._partial = 0, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Follower":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        self._thread.join(timeout=2)
        self.poll()
        return False

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.poll()

    def poll(self) -> None:
        try:
            with open(self.path, "r", errors="replace") as f:
                f.seek(self._pos)
                text = f.read()
                self._pos = f.tell()
        except (FileNotFoundError, OSError):
            return
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        if lines:
            try:
                self.on_lines(lines)
            except Exception:     # a malformed progress line never stops the run
                pass


_REPORTER = Reporter(level=QUIET)


def configure(level: int = NORMAL, **kw) -> Reporter:
    """Set the process's reporter (``moehub`` does this from -q/-v); returns it."""
    global _REPORTER
    _REPORTER = Reporter(level=level, **kw)
    return _REPORTER


def get() -> Reporter:
    return _REPORTER


def stage(name: str, total: Optional[int] = None, unit: str = "", **kw) -> Stage:
    """A stage of the process's reporter (see :meth:`Reporter.stage`)."""
    return _REPORTER.stage(name, total, unit, **kw)


def info(text: str) -> None:
    _REPORTER.info(text)


def debug(text: str) -> None:
    _REPORTER.debug(text)


def set_reporter(reporter: Reporter) -> None:
    """Put back a reporter (``moehub`` restores the caller's after a command)."""
    global _REPORTER
    _REPORTER = reporter
