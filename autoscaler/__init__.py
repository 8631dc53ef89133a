"""The online serving loop (DESIGN.md, "Serving loop"), split by role:

- `input/`     feeders: the cluster (API or `--cluster-state` file), the model registry step
- `model/`     state: the cluster snapshot, the decisions with their reasons
- `logic/`     pure estimators: VPA, predictive HPA (+ the reactive HPA simulator), reclaimable
               resources, guardrails, and their replay over recorded series
- `output/`    objects and patches as the published schemas describe them; API / file / dry-run sinks
- `routines/`  `ServingLoop.run_once()` (named, timed steps) and Lease-based leader election
- `kube.py`    the one wrapper over the official `kubernetes` client
- `metrics.py` /metrics, /healthz, /readyz on one port
- `demo.py`    the demo cluster as objects, and one offline run over it

(`replay/` and `simulation/`, the replay command and the colocation simulator, reuse `logic/`.)
"""
