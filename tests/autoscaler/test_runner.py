"""The run-forever driver (`autoscaler/routines/runner.py`): runs the loop until stopped, only while
holding the Lease, and reports ready while standing by."""
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.leader import LeaderElector
from autoscaler.routines.loop import OK, ServingLoop
from autoscaler.routines.runner import Runner
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of
from tests.autoscaler.test_kube_fake import api  # noqa: F401 - the fake API server fixture


def loop_for(objects, history) -> ServingLoop:
    s = fast_settings()
    s.loop.interval = "1s"
    return ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink())


def test_runs_until_stopped_and_hands_each_report_over(objects, history):
    reports = []
    runner = Runner(loop_for(objects, history), None, lambda: True, lambda rep: None)

    def keep(rep):
        reports.append(rep)
        if len(reports) == 2:
            runner.stop.set()

    runner.on_report = keep
    runner.run()
    assert [r.outcome for r in reports] == [OK, OK]
    assert runner.live() and runner.ready()


class Tries:
    """A real elector; the runner stops after its first try."""

    def __init__(self, elector: LeaderElector, runner_box: list):
        self.elector, self.box = elector, runner_box

    @property
    def leading(self) -> bool:
        return self.elector.leading

    def try_acquire(self) -> bool:
        self.box[0].stop.set()
        return self.elector.try_acquire()


def test_a_replica_without_the_lease_does_not_run_and_reports_ready(api, objects, history):  # noqa: F811
    _, kube, _ = api
    t = [1000.0]
    assert LeaderElector(kube, "tidewise", "serve", "pod-a", 15, clock=lambda: t[0]).try_acquire()
    box: list = [None]
    reports: list = []
    standby = Tries(LeaderElector(kube, "tidewise", "serve", "pod-b", 15, clock=lambda: t[0]), box)
    box[0] = runner = Runner(loop_for(objects, history), standby, lambda: None, reports.append)  # type: ignore[arg-type]
    runner.run()
    assert reports == []  # pod-a holds the Lease: pod-b decided and wrote nothing
    assert runner.ready()  # standing by is healthy


class Cycle:
    """An object in a reference cycle: only the cyclic GC frees it."""

    def __init__(self) -> None:
        self.me = self


def test_the_cyclic_garbage_of_a_run_is_collected_after_the_run_is_handed_over_not_inside_it(objects, history):
    import gc
    import weakref

    loop = loop_for(objects, history)
    runner = Runner(loop, None, lambda: True, lambda rep: None)
    seen: dict = {}

    def tail_of_the_run(rep, ctx):  # an observer: the last thing a run does
        garbage = Cycle()
        seen["ref"] = weakref.ref(garbage)
        seen["gc during the run"] = gc.isenabled()

    def handed_over(rep):
        seen["gc at hand-over"] = gc.isenabled()
        seen["alive at hand-over"] = seen["ref"]() is not None
        runner.stop.set()

    loop.observers.append(tail_of_the_run)
    runner.on_report = handed_over
    assert gc.isenabled()
    try:
        runner.run()
        assert seen["gc during the run"] is False and seen["gc at hand-over"] is False
        assert seen["alive at hand-over"]  # nothing collected it inside the run
        assert gc.isenabled()  # on again before the runner waits for the next run
        assert seen["ref"]() is None  # and the run's cycle is gone
        assert loop.collect_garbage() == 0.0  # nothing held any more
    finally:
        gc.enable()


def test_a_run_outside_the_runner_turns_the_gc_on_again_itself(objects, history):
    import gc

    loop = loop_for(objects, history)
    assert gc.isenabled()
    loop.run_once()
    assert gc.isenabled()  # one-shot commands (serve --once, replay) collect as before
    assert loop.collect_garbage() == 0.0
