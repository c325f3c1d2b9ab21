"""Regression tests for hostile input: what one tenant's objects must never do to another's."""
