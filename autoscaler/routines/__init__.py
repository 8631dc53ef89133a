"""The loop (`loop.ServingLoop.run_once`) and leader election (`leader`)."""
