import pandas as pd

from predictor.history import history_from_frame
from predictor.sources.synthetic import generate_cluster
from training.decision_time import DecisionTimeSettings

# A tiny global GBM so that training tests stay in seconds.
FAST_GLOBAL = {"max_iter": 10, "max_origins": 3, "max_rows": 4000}
# tests of the day-ahead training switch the decision-time models off: their fits and backtests are ~94%
# of a small run's CPU (6.6 s against 0.4 s); tests/training/test_decision_time_training.py tests them
NO_DECISION_TIME = DecisionTimeSettings(enabled=False)


def small_history(workloads: int = 3, days: float = 8, seed: int = 7, end: str = "2024-08-20"):
    cluster = generate_cluster(seed=seed, workloads=workloads, namespaces=2, nodes=2, days=days, end=end)
    return history_from_frame(cluster.history(resources=("cpu",)), pd.Timedelta("5min"))
