"""The OpenAPI 3.1 document, generated from the route table and the msgspec structs the
handlers decode and encode, so the schema cannot drift from what the code validates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ._schemas import ErrorOut


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    role: str | None  # None: no token needed
    request: type | None = None
    response: type | None = None
    status: int = 200
    media: str = "application/json"


def openapi(operations: list[Operation], version: str) -> dict[str, Any]:
    types = {t for op in operations for t in (op.request, op.response) if t is not None}
    types.add(ErrorOut)
    ordered = sorted(types, key=lambda t: t.__name__)
    refs, components = msgspec.json.schema_components(
        ordered, ref_template="#/components/schemas/{name}"
    )
    ref = dict(zip(ordered, refs, strict=True))
    error = {"content": {"application/json": {"schema": ref[ErrorOut]}}}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        ok: dict[str, Any] = {"description": "OK"}
        if op.response is not None:
            ok["content"] = {op.media: {"schema": ref[op.response]}}
        elif op.media != "application/json":
            ok["content"] = {op.media: {"schema": {"type": "string"}}}
        responses: dict[str, Any] = {str(op.status): ok}
        if op.role is not None:
            responses["401"] = {"description": "no, wrong or revoked token", **error}
            responses["403"] = {"description": f"the token lacks the {op.role} role", **error}
        if op.request is not None:
            responses["413"] = {"description": "body over the size limit", **error}
            responses["422"] = {"description": "invalid body; `field` names where", **error}
        entry: dict[str, Any] = {
            "summary": op.summary,
            "responses": responses,
            "security": [{"bearer": []}, {"cookie": []}] if op.role else [],
        }
        if op.role is not None:
            entry["x-role"] = op.role
        if op.request is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref[op.request]}},
            }
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _path_params(op.path)
        ]
        if params:
            entry["parameters"] = params
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "skillog service", "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "skillog_token"},
            },
        },
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
