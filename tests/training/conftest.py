import pandas as pd
import pytest

from predictor.history import history_from_frame
from predictor.sources.synthetic import generate_cluster


def small_history(workloads: int = 3, days: float = 8, seed: int = 7, end: str = "2024-08-20"):
    cluster = generate_cluster(seed=seed, workloads=workloads, namespaces=2, nodes=2, days=days, end=end)
    return history_from_frame(cluster.history(resources=("cpu",)), pd.Timedelta("5min"))


@pytest.fixture
def fast_global(monkeypatch):
    """A tiny global GBM so that training tests stay in seconds."""
    from predictor.models import gbm

    orig = gbm.GlobalGBM.__init__

    def init(self, *a, **kw):
        orig(self, *a, **kw)
        self.max_iter, self.max_origins, self.max_rows = 10, 3, 4000

    monkeypatch.setattr(gbm.GlobalGBM, "__init__", init)
