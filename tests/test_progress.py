"""The progress reporter (moehub.progress) and results folders written whole (moehub.paths).

Fast: a fake clock and a string stream stand in for time and the terminal."""
import io
import json

import pytest

from moehub import paths, progress
from moehub.progress import NORMAL, QUIET, VERBOSE, Follower, Reporter, fmt_duration


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def reporter(level=NORMAL, tty=False, interval=0.0):
    clock, out = Clock(), io.StringIO()
    return Reporter(level, stream=out, tty=tty, interval=interval, clock=clock), clock, out


def test_quiet_prints_nothing():
    rep, clock, out = reporter(QUIET)
    with rep.stage("sim", total=10, unit="packets", heartbeat=True) as st:
        clock.t = 5
        st.update(5, cycles=100)
    rep.info("a message")
    assert out.getvalue() == ""


def test_eta_appears_when_the_total_is_known():
    rep, clock, out = reporter()
    with rep.stage("sim", total=100, unit="packets") as st:
        clock.t = 10.0
        st.update(25, cycles=5000)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sim ..."
    assert lines[1] == ("sim: 25/100 packets (25%), 5,000 cycles at 500/s, elapsed 10 s, "
                        "ETA 30 s")
    assert lines[2] == "sim: done in 10 s (25/100 packets, 5,000 cycles at 500/s)"


def test_rate_and_eta_between_two_reports():
    """A subprocess reports now and then; in between, the rate stays what was measured and
    the ETA counts down."""
    rep, clock, out = reporter()
    with rep.stage("sim", total=100, unit="packets") as st:
        clock.t = 10.0
        st.update(25, cycles=5000)
        clock.t = 14.0
        st.update()                   # a heartbeat, no news
    assert out.getvalue().splitlines()[2] == ("sim: 25/100 packets (25%), 5,000 cycles at "
                                              "500/s, elapsed 14 s, ETA 26 s")


def test_no_eta_without_a_total_or_when_asked_not_to():
    rep, clock, out = reporter()
    with rep.stage("yosys") as st:
        clock.t = 75
        st.update(note="ABC pass")
    with rep.stage("cosim", total=7, unit="systems", eta=False) as st:
        clock.t = 80
        st.update(2, note="comet")
    text = out.getvalue()
    assert "yosys: elapsed 1m15s: ABC pass" in text
    assert "cosim: 2/7 systems (29%), elapsed 5.0 s: comet" in text
    assert "ETA" not in text


def test_updates_are_rate_limited():
    rep, clock, out = reporter(interval=30.0)
    with rep.stage("sim", total=1000) as st:
        for i in range(1, 100):
            clock.t = i * 0.5          # 50 s: one update after 30 s
            st.update(i)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines      # start, one update, done


def test_a_terminal_gets_one_line_redrawn_in_place():
    rep, clock, out = reporter(tty=True)
    with rep.stage("sim", total=4) as st:
        clock.t = 1
        st.update(2)
    text = out.getvalue()
    assert text.startswith("\rsim: 0/4 (0%), elapsed 0.0 s\033[K")
    assert "\rsim: 2/4 (50%), elapsed 1.0 s, ETA 1.0 s\033[K" in text
    assert text.endswith("\rsim: done in 1.0 s (2/4)\033[K\n") and text.count("\n") == 1


def test_only_the_innermost_stage_draws():
    rep, clock, out = reporter()
    with rep.stage("outer", total=2) as outer:
        with rep.stage("inner") as inner:
            outer.update(1)            # suppressed while inner runs
            inner.update(note="x")
        outer.update(1)
    lines = out.getvalue().splitlines()
    assert lines == ["outer ...", "inner ...", "inner: elapsed 0.0 s: x",
                     "inner: done in 0.0 s", "outer: 1/2 (50%), elapsed 0.0 s",
                     "outer: done in 0.0 s (1/2)"]


def test_verbose_messages_only_when_verbose():
    for level, shown in ((NORMAL, False), (VERBOSE, True)):
        rep, _, out = reporter(level)
        rep.debug("log: x")
        rep.info("hello")
        assert ("log: x" in out.getvalue()) == shown and "hello" in out.getvalue()


def test_an_interrupted_stage_says_nothing_more():
    """Ctrl-C is reported once, by moehub's main: the stage only clears its live line."""
    rep, _, out = reporter(tty=True)
    with pytest.raises(KeyboardInterrupt):
        with rep.stage("sim"):
            raise KeyboardInterrupt
    assert out.getvalue().endswith("\r\033[K") and "done" not in out.getvalue()


def test_durations():
    assert [fmt_duration(s) for s in (4.24, 42, 185, 3725)] == ["4.2 s", "42 s", "3m05s",
                                                               "1h02m"]


def test_follower_reads_complete_new_lines(tmp_path):
    f = tmp_path / "progress.txt"
    got = []
    fol = Follower(f, got.append)
    fol.poll()                           # no file yet: nothing
    f.write_text("1 2\n3 ")
    fol.poll()
    with open(f, "a") as h:
        h.write("4\n5 6\n")
    fol.poll()
    assert got == [["1 2"], ["3 4", "5 6"]]


def test_library_use_is_quiet_by_default(capsys):
    with progress.stage("x", total=3) as st:
        st.update(1)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------- results folders
def test_results_folder_is_written_whole_or_not_at_all(tmp_path):
    final = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        with paths.writing(final) as tmp:
            (tmp / "stats.json").write_text("{}")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []          # no half-written folder, no temporary
    with paths.writing(final, extra_key=1) as tmp:
        (tmp / "stats.json").write_text("{}")
    rec = json.loads((final / "run.json").read_text())
    for key in ("command", "moehub_version", "git", "python", "amaranth", "numpy", "started",
                "wall_s", "cpu_s"):
        assert key in rec, key
    assert rec["extra_key"] == 1 and rec["cpu_s"] >= rec["cpu_self_s"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_existing_results_folder_needs_force(tmp_path):
    final = tmp_path / "run"
    final.mkdir()
    (final / "keep").write_text("old")
    with pytest.raises(paths.OutputExistsError, match="--force"):
        with paths.writing(final) as tmp:
            (tmp / "new").write_text("new")
    assert (final / "keep").read_text() == "old"
    with paths.writing(final, force=True) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new", "run.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
