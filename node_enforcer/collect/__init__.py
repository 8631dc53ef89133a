"""Collection: what the node is and holds now (sysfs, pods, QoS, the reclaim plan, /proc pressure)."""
