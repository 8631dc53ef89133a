"""The file sink renames over its targets, so it must refuse a target that is not a regular file."""
import os
import stat

from autoscaler.output.objects import Change
from autoscaler.output.sinks import FAILED, WRITTEN, FileSink, file_path


def _change(name="web"):
    obj = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": name, "namespace": "shop"}}
    return Change("VerticalPodAutoscaler", "autoscaling.k8s.io/v1", "shop", name, obj, {})


def test_file_sink_keeps_a_fifo_where_its_file_goes(tmp_path):
    sink = FileSink(str(tmp_path))
    blocked = file_path(str(tmp_path), _change("web"))
    os.makedirs(os.path.dirname(blocked))
    os.mkfifo(blocked)  # rename would silently replace it
    r = sink.write(_change("web"))
    assert r.outcome == FAILED and "named pipe" in r.detail
    assert stat.S_ISFIFO(os.lstat(blocked).st_mode)
    ok = sink.write(_change("api"))
    assert ok.outcome == WRITTEN and open(file_path(str(tmp_path), _change("api"))).read().startswith("apiVersion")


def test_file_sink_leaves_no_temp_file_beside_a_folder(tmp_path):
    sink = FileSink(str(tmp_path))
    blocked = file_path(str(tmp_path), _change("web"))
    os.makedirs(blocked)  # a folder named like the YAML it would write
    r = sink.write(_change("web"))
    assert not [f for f in os.listdir(os.path.dirname(blocked)) if ".tmp" in f]
    assert r.outcome == FAILED and "is a folder" in r.detail
    assert os.path.isdir(blocked) and not os.listdir(blocked)
