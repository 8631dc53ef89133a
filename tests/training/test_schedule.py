"""`train --every`: a failed run is reported and retried next period; the period counts from the
start of a run, so a long run waits less."""
import pytest

from contracts.errors import InputError
from training.schedule import run_every


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_a_failed_run_is_said_and_the_next_one_still_happens():
    clock, said, calls = Clock(), [], []

    def job():
        calls.append(clock.t)
        clock.t += 600.0  # each run takes 10 minutes
        if len(calls) == 1:
            raise InputError("history is empty")

    run_every(3600.0, job, say=said.append, sleep=clock.sleep, clock=clock.now, runs=2)
    assert calls == [0.0, 3600.0]
    assert clock.slept == [3000.0, 3000.0]
    assert said[0] == "tidewise train: run failed: history is empty; the registry keeps its last good version"
    assert said[1] == "next training run in 0.8 h"


def test_a_bug_ends_the_schedule():
    clock = Clock()

    def job():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_every(3600.0, job, say=lambda _: None, sleep=clock.sleep, clock=clock.now, runs=3)
    assert clock.slept == []
