import pandas as pd

from predictor.history import history_from_frame
from predictor.sources.synthetic import generate_cluster

# A tiny global GBM so that training tests stay in seconds.
FAST_GLOBAL = {"max_iter": 10, "max_origins": 3, "max_rows": 4000}


def small_history(workloads: int = 3, days: float = 8, seed: int = 7, end: str = "2024-08-20"):
    cluster = generate_cluster(seed=seed, workloads=workloads, namespaces=2, nodes=2, days=days, end=end)
    return history_from_frame(cluster.history(resources=("cpu",)), pd.Timedelta("5min"))
