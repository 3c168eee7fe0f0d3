"""Engines other than the plain CLI that run one Claude turn for the run supervisor.

The CLI engine is the supervisor's own path (``runner`` + ``cli``). ``sdk`` runs the turn
through claude-agent-sdk's ``ClaudeSDKClient`` so the built-in ``AskUserQuestion`` reaches
the app through ``can_use_tool``; it hands the supervisor an object with the same
interface as ``processes.ManagedProcess``, so limits, cancel, events and clean-up are
shared, not copied.
"""
