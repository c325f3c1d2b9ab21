"""Thread plumbing the other rooms share: a kopf operator on a thread of its own, and the stop
sequence bounded in time."""
