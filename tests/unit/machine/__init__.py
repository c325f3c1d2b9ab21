"""Unit tests of the machine loop: sequencing, power, status, linkage, backoff."""
