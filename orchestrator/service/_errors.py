"""Errors to status codes, in one place: every handler raises, this module answers.

A client error is a JSON object ``{"error": what happened and what to do, "field":
where (a JSON path like ``$.task``) or null}``. Nothing a client sends can produce a
500: bad input is a 4xx naming the field; an unexpected failure is a 500 that says
nothing about the server's internals (it is logged).
"""

from __future__ import annotations

import logging
import re

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from eventlog import ConcurrencyError, SkillogError, StoreError

from .._approvals import ApprovalError
from .._session import SessionNotFoundError

log = logging.getLogger("skillog.service")


class ApiError(Exception):
    """An answer other than 2xx, raised by a handler."""

    def __init__(self, status: int, error: str, field: str | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field


_AT = re.compile(r" - at `(\$[^`]*)`$")
_NAMED = re.compile(r"(?:unknown|missing required) field `([^`]*)`")


def validation_field(message: str) -> str:
    """``$.task`` from msgspec's "Expected `str`, got `int` - at `$.task`"; an unknown
    or missing field is named by its parent and its name (``$.x``)."""
    at = _AT.search(message)
    where = at.group(1) if at else "$"
    named = _NAMED.search(message)
    return f"{where}.{named.group(1)}" if named else where


def error_response(status: int, error: str, field: str | None = None) -> JSONResponse:
    # After a 413 the rest of the body is unread: the connection cannot be reused.
    headers = {"connection": "close"} if status == 413 else None
    return JSONResponse({"error": error, "field": field}, status_code=status, headers=headers)


def _status(exc: Exception) -> tuple[int, str, str | None]:
    if isinstance(exc, ApiError):
        return exc.status, exc.error, exc.field
    if isinstance(exc, msgspec.ValidationError):
        return 422, f"invalid request body: {exc}", validation_field(str(exc))
    if isinstance(exc, msgspec.DecodeError):
        return 422, f"the request body is not valid JSON: {exc}", "$"
    if isinstance(exc, ApprovalError):
        return 409, str(exc), None
    if isinstance(exc, SessionNotFoundError):
        return 404, str(exc), None
    if isinstance(exc, ConcurrencyError):
        return 409, f"the log moved on while this request was recorded: {exc}", None
    if isinstance(exc, StoreError):
        return 503, "the event log is unavailable; try again", None
    if isinstance(exc, HTTPException):
        return exc.status_code, str(exc.detail), None
    if isinstance(exc, SkillogError):
        return 400, str(exc), None
    log.exception("unexpected error", exc_info=exc)
    return 500, "internal error (logged by the server)", None


async def handle(request: Request, exc: Exception) -> Response:
    """The app's one exception handler."""
    status, error, field = _status(exc)
    if status >= 500 and not isinstance(exc, ApiError):
        log.error("%s %s: %s", request.method, request.url.path, exc)
    return error_response(status, error, field)
