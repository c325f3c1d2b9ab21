"""Catalog objects (images, sizing profiles, networks, storage) and pure reference resolution.

Nothing here performs I/O: callers hand in the objects they read, and get back resolved values or
problems to report.
"""
