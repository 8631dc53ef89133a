"""What a run writes: the objects and patches (`objects`) and where they go (`sinks`)."""
