"""Hosts as objects: inventory, allocation and placement (pure)."""
