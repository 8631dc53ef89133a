"""State: the cluster as read (`cluster`) and the decisions made (`decisions`)."""
