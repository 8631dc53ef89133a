"""decisions.json of the file sink (issue 14): every change's reasons, one change per line, written
through json's C encoder (the indented pure-Python encoder took seconds a run at fleet size)."""
import json

from autoscaler.output.objects import Change
from autoscaler.output.sinks import WRITTEN, FileSink


def _change(name: str, target: float) -> Change:
    obj = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": name, "namespace": "shop"}, "spec": {}}
    return Change("VerticalPodAutoscaler", "autoscaling.k8s.io/v1", "shop", name, obj, {}, "status",
                  reasons={"app": {"cpu": {"target": target, "quantile": 0.9, "steps": [1, 2, 3]}}})


def test_decisions_one_change_per_line_and_every_reason_kept(tmp_path):
    sink = FileSink(str(tmp_path))
    changes = [_change("b-api", 0.25), _change("a-web", 1.5), _change("c-db", 2e-05)]
    assert all(sink.write(c).outcome == WRITTEN for c in changes)
    sink.close()
    text = (tmp_path / "decisions.json").read_text()
    assert json.loads(text) == {c.key: c.reasons for c in changes}
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert [json.loads("{" + line.rstrip(",") + "}").popitem()[0] for line in lines[1:-1]] == \
        sorted(c.key for c in changes)
