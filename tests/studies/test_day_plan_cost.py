"""The restart regime's cost benchmark (benchmarks/day_plan_cost.py) that BENCHMARKS.md's "a new day's
plans" paragraph quotes: it times the planner with and without the week kept from yesterday, with the
memo the serve benchmark rebuilds for its new day, and with yesterday's stock targets as serve read them,
which make the same choices, and the hourly stock read one series at a time and all at once (the same
targets)."""
from benchmarks.day_plan_cost import main


def test_the_day_plan_cost_benchmark_times_both_planners_making_the_same_choices(capsys):
    main(["--series", "12"])
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines()
            if line.startswith(("| a ", "| the stock", "| the same"))}
    fresh = rows["a new day's plan, the whole week worked out"]
    kept = rows["a new day's plan, with the week kept from yesterday"]
    rebuilt = rows["a new day's plan, with the serve benchmark's memo (yesterdays_memo)"]
    assert float(fresh[1]) > 0 and float(kept[1]) > 0 and float(rebuilt[1]) > 0
    assert fresh[2] == kept[2] and "plan " in fresh[2] and "stock rule " in fresh[2]  # the same choices
    assert rebuilt[2] == kept[2]  # today planned again from yesterday's week: the same choices
    read = rows["a new day's plan, the week kept and yesterday's hours read where the stock rule served"]
    assert float(read[1]) > 0 and read[2] == kept[2]  # yesterday's stock targets read, not worked out: the same
    alone = rows["the stock rule's target for the hour (read once an hour a series it serves), one at a time"]
    together = rows["the same, every series due at once (`stock_at`, as a run reads them)"]
    assert float(alone[1]) > 0 and float(together[1]) > 0
    assert together[2].startswith("12 of 12 equal to the bit")
    assert out.startswith("12 series of 10 days, the first run of ")
