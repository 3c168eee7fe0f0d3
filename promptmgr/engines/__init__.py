"""The engines that run one Claude turn for the run supervisor (``runner``).

``base`` says what the supervisor needs of a turn (the ``Turn`` protocol: stream-json
messages with timeouts, terminate, stop, the stderr tail). ``cli`` runs ``claude -p``
with the prompt on stdin; ``sdk`` runs the same CLI through claude-agent-sdk's
``ClaudeSDKClient``, so the built-in ``AskUserQuestion`` reaches the app through
``can_use_tool``. Each engine only starts its turn; the supervisor's read loop, limits,
cancel, outcome and clean-up are written once for both.
"""
