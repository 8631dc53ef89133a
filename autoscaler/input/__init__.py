"""Feeders: the cluster snapshot (API or file) and the history source (file, synthetic, Prometheus)."""
