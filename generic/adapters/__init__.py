"""The shells of the generic controller: the only modules that import `kubernetes` or `kopf`.

They gather inputs and apply decisions; every decision is made by the pure core in `generic.*`.
An import-linter contract in pyproject.toml keeps it that way.
"""
