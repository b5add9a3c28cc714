"""``moehub report``'s CSV readers (one reader serves ``validation.csv`` and
``calibration.csv``): figures become floats, the flag columns booleans, and a file
without one of its columns is refused naming the column."""
import csv

import pytest

from moehub.scripts import report


def _write(path, columns, row):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerow(row)
    return path


def test_calibration_rows_are_typed(tmp_path):
    row = ["p", "launch", "what", "H100", "h100x8", "us", "4.5", "4.3", "us", "1.05", "0.3",
           "False", "True", "src", "why"]
    [r] = report.read_calibration_csv(_write(tmp_path / "c.csv", report.CALIBRATION_FIELDS, row))
    assert r["model"] == 4.5 and r["published"] == 4.3 and r["ratio"] == 1.05 and r["tolerance"] == 0.3
    assert r["ok"] is False and r["expected_miss"] is True and r["unit"] == "us"


def test_validation_rows_are_typed(tmp_path):
    row = ["v", "use", "h100x8", "us", "2", "4", "0.5", "0.25", "True", "H100", "cfg", "src", ""]
    [r] = report.read_validation_csv(_write(tmp_path / "v.csv", report.VALIDATION_FIELDS, row))
    assert r["ok"] is True and r["ratio"] == 0.5 and r["model"] == 2.0 and r["id"] == "v"


@pytest.mark.parametrize("reader, columns", [(report.read_validation_csv, report.VALIDATION_FIELDS),
                                             (report.read_calibration_csv, report.CALIBRATION_FIELDS)])
def test_a_missing_column_is_named(tmp_path, reader, columns):
    kept = [c for c in columns if c != "tolerance"]
    path = _write(tmp_path / "x.csv", kept, ["1"] * len(kept))
    with pytest.raises(report.ReportError, match=f"{path}: no column 'tolerance'"):
        reader(path)
