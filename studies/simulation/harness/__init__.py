"""What every simulation study shares: traces, the cluster, the batch queue, the rolling-origin
forecast and its cache, the settings sweep, outputs and the report page's common parts."""
