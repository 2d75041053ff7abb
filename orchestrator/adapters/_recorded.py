"""A model that answers with recorded responses, for replay's re-drive."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from .._model import ModelError, ModelRequest, ModelResponse
from ._errors import AdapterConfigError, RecordingError

RequestHash = Callable[[ModelRequest], str]


class RecordedModel:
    """A :class:`ModelAdapter` that answers call ``i`` with recorded outcome ``i``.

    An outcome is a :class:`ModelResponse` (returned) or a :class:`ModelError` (raised,
    to replay a recorded failure and its retry). A call beyond the recording raises
    :class:`RecordingError`. With ``expected_hashes``, call ``i`` first checks
    ``request_hash(request)`` against ``expected_hashes[i]`` and raises
    :class:`RecordingError` with both hashes on a mismatch; the hash function is the
    caller's (replay passes the composer's), since only it knows the canonical bytes.
    A failed call does not advance the position.
    """

    def __init__(
        self,
        outcomes: Sequence[ModelResponse | ModelError],
        *,
        expected_hashes: Sequence[str] | None = None,
        request_hash: RequestHash | None = None,
        provider: str = "skillog.recorded",
    ) -> None:
        if expected_hashes is not None:
            if request_hash is None:
                raise AdapterConfigError(
                    "RecordedModel: expected_hashes needs request_hash, the function that "
                    "hashed the recorded requests"
                )
            if len(expected_hashes) != len(outcomes):
                raise AdapterConfigError(
                    f"RecordedModel: {len(outcomes)} outcomes but {len(expected_hashes)} "
                    "expected hashes; give one hash per recorded call"
                )
        self._outcomes = tuple(outcomes)
        self._hashes = None if expected_hashes is None else tuple(expected_hashes)
        self._request_hash = request_hash
        self._provider = provider
        self._next = 0

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def calls(self) -> int:
        """How many recorded outcomes have been used."""
        return self._next

    @property
    def remaining(self) -> int:
        return len(self._outcomes) - self._next

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        index = self._next
        if index >= len(self._outcomes):
            raise RecordingError(
                f"model call {index} has no recorded response: the recording holds "
                f"{len(self._outcomes)}; the code under replay calls the model more often "
                "than the recorded session did",
                index=index,
            )
        if self._hashes is not None and self._request_hash is not None:
            actual = self._request_hash(request)
            if actual != self._hashes[index]:
                raise RecordingError(
                    f"model call {index}: the request differs from the recording (recorded "
                    f"sha256 {self._hashes[index]}, now {actual}); the code under replay "
                    "composes a different prompt (replay's prompt diff shows where)",
                    index=index,
                )
        self._next += 1
        outcome = self._outcomes[index]
        if isinstance(outcome, ModelError):
            raise outcome
        return outcome
