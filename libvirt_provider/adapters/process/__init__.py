"""One daemon process: the run modes' shared start and stop sequence, signals, the probe and
metrics endpoints, the C heap, and the checks of the command line's configuration."""
