"""The provider controllers' Kubernetes calls, in one adapter that returns plain dicts and raises
the provider's own error classes."""
