"""What the tests and some benchmarks stand on, never shipped (pyproject excludes it; a test lists the
wheel's files): the one local fake of the Kubernetes API server (`kube_fake`, with its watch streams
in `watch_stream` and the vendored CRD schemas it validates writes against in `k8s_schemas`) and a
throw-away Kubernetes-shaped tree on the real cgroups (`realcgroups`). No shipped package imports it."""
