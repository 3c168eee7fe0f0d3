"""Hardening: bad input, Redis outages, stream footprint, start-up checks."""
