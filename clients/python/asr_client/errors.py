"""Errors raised by the client.

    AsrError
      ConnectionFailedError    the server could not be reached (after the retries)
      ApiError                 a problem+json answer: `status`, stable `code`, `problem`
        AuthenticationError      401
        NotFoundError            404 (another tenant's session is one too)
        ConflictError            409
        PreconditionFailedError  412 (If-Match named an old version)
        PayloadTooLargeError     413
        ValidationError          400, 422
        RateLimitedError         429 (after the retries)
        ServerError              5xx (503 after the retries)
"""

from __future__ import annotations

from typing import Any

import httpx


class AsrError(Exception):
    """Base of every error this client raises."""


class ConnectionFailedError(AsrError):
    """No answer from the server: refused, reset or timed out, also after the retries."""


class ApiError(AsrError):
    """A problem+json answer: `status`, stable `code`, and the whole `problem` body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code = str(problem.get("code", f"http_{status}"))
        super().__init__(f"{status} {self.code}: {problem.get('detail') or problem.get('title')}")


class AuthenticationError(ApiError): ...


class NotFoundError(ApiError): ...


class ConflictError(ApiError): ...


class PreconditionFailedError(ApiError): ...


class ValidationError(ApiError): ...


class PayloadTooLargeError(ApiError): ...


class RateLimitedError(ApiError):
    @property
    def retry_after(self) -> int:
        return int(self.problem.get("retry_after", 1))


class ServerError(ApiError): ...


_ERRORS: dict[int, type[ApiError]] = {
    400: ValidationError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
}


def raise_for_problem(response: httpx.Response) -> None:
    """Raise the `ApiError` subclass of an error answer (the body must have been read)."""
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.text[:200]}
    if not isinstance(problem, dict):
        problem = {"title": str(problem)[:200]}
    status = response.status_code
    cls = _ERRORS.get(status, ServerError if status >= 500 else ApiError)
    raise cls(status, problem)
