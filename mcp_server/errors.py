"""Why a wait for the user's answer or decision ended without one.

``server.ask_user`` and ``approvals.approve`` map each to a sentence for Claude.
"""

from __future__ import annotations


class RelayError(Exception):
    """Base of everything that ends a wait without an answer."""


class RelayUnavailable(RelayError):
    """PromptManager could not be reached, or answered in a way this client does not understand."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RelayAuthRejected(RelayUnavailable):
    def __init__(self, status: int) -> None:
        super().__init__(f"the relay token was refused with HTTP {status}")


class RequestRejected(RelayError):
    """PromptManager refused the body (a question or a permission request) with 400/422."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class RunFinished(RelayError):
    """The run is over, so the question or permission request was never shown or never decided."""


class QuestionExpired(RelayError):
    def __init__(self, timeout: int) -> None:
        super().__init__(f"no answer within {timeout} seconds")
        self.timeout = timeout


class QuestionCancelled(RelayError):
    """The run is ending; nobody will answer."""


class QuestionSuperseded(QuestionCancelled):
    """A newer question replaced this one before the user answered; nobody will answer it."""


class DecisionTimedOut(RelayError):
    """No decision arrived before our own deadline (the server normally decides, with a deny, first)."""

    def __init__(self, timeout: int) -> None:
        super().__init__(f"no decision within {timeout} seconds")
        self.timeout = timeout


class DecisionMalformed(RelayError):
    """poll-decision said "decided" but its ``result`` is not a permission result the CLI accepts."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
