"""Support for the tests and the benchmarks: a throw-away Kubernetes-shaped tree on the real cgroups
(`realcgroups`) and an HTTP fake of the few API server endpoints the agent calls (`fake_api`).
The agent itself never imports it."""
