"""The fit-cost benchmark BENCHMARKS.md's "LightGBM for the decision-time models" quotes: one row per
fleet and backend, each a fit that ran, at the levels asked for."""
from benchmarks.decision_fit_cost import main
from predictor.models.decision_time import BACKENDS


def test_the_fit_cost_benchmark_times_every_backend_on_both_fleets(capsys):
    main(["--workloads", "1", "--days", "3", "--levels", "1"])  # one level: the table, not the timing
    out = capsys.readouterr().out
    assert out.startswith("one fit of the hour-peak model (1 levels), CPU seconds")
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "x" in line]
    assert sorted((r[0].lstrip("| "), r[1]) for r in rows) == sorted(
        (f, b) for f in ("2 series x 3 d", "2 series x 3 d") for b in BACKENDS)
    assert all(int(r[2]) > 80 and float(r[3]) > 0 for r in rows)
