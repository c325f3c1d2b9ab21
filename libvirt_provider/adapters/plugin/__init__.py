"""`kubectl vm`: the plugin users run (a console script, `kubectl-vm`)."""
