"""What tests, fixtures and benchmarks share, as a library.

Why a package: conftest modules are for pytest's fixtures and a test module is for its tests;
helpers that several of them need live here instead, each module saying what it holds and why.
`waiting` is the one deadline-bounded wait. Importing the package itself imports nothing.
"""
