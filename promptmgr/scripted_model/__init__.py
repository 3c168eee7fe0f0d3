"""A scripted stand-in for the Anthropic Messages API.

It is the only simulated part of the system: the real Claude Code CLI talks to it
through ``ANTHROPIC_BASE_URL``. Tests, the offline demo and the benchmarks use it.
"""
