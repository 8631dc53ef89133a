"""Enforcement: the filesystem port, the cgroup drivers, write-what-differs, checkpoint, evictions."""
