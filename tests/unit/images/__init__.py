"""Unit tests of images: import, cache status, collection, digests."""
