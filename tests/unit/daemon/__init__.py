"""Unit tests of the daemon's command line and start-up checks."""
