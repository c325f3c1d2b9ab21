"""Per-machine metrics: what libvirt's bulk domain statistics become on /metrics (pure)."""
