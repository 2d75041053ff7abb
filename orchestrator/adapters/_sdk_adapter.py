"""The part of an SDK-backed adapter that does not depend on the provider."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import msgspec
import trio

from .._model import Delta, DeltaSink, ModelRequest, ModelResponse
from ._errors import AdapterConfigError
from ._sdk import import_sdk, map_sdk_error
from ._translate import model_name
from ._wire import WireNames


class SdkAdapter:
    """Calls a provider through its SDK: one request, one attempt, errors mapped.

    Subclasses name the SDK and translate; this class owns the client and the call.
    """

    PROVIDER: ClassVar[str]
    _MODULE: ClassVar[str]
    _CLIENT_CLASS: ClassVar[str]
    _BASE_ERROR: ClassVar[str]
    _KEY_VARIABLES: ClassVar[tuple[str, ...]]

    def __init__(self, client: Any, *, model: str, base_url: str | None = None) -> None:
        self._sdk = import_sdk(self._MODULE, extra=self.PROVIDER)
        if client is None:
            key = next((os.environ[v] for v in self._KEY_VARIABLES if os.environ.get(v)), None)
            if key is None and base_url is None:
                raise AdapterConfigError(
                    f"{self._KEY_VARIABLES[0]} is not set: export it, or pass a configured "
                    f"{self._MODULE}.{self._CLIENT_CLASS} client"
                )
            # A compatible server at base_url (vLLM, Ollama, a LiteLLM proxy) may need
            # no key; the SDK insists on one, which such servers ignore.
            client = getattr(self._sdk, self._CLIENT_CLASS)(
                max_retries=0, base_url=base_url, api_key=key or "unused"
            )
        else:
            # The loop's bounded retry policy must be the only one: SDK retries would
            # multiply attempts and hide them from the log.
            client = client.with_options(max_retries=0)
        self._client: Any = client
        self.model = model

    @property
    def provider(self) -> str:
        """The OpenTelemetry ``gen_ai.provider.name`` of this adapter."""
        return self.PROVIDER

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """:meth:`complete` through the provider's streaming API: text and tool-call
        deltas go to ``on_delta`` as they arrive; the response returned is the one
        :meth:`complete` would return for the same answer (the stream is assembled into
        the body a request without streaming gets, and translated by the same code)."""
        await trio.lowlevel.checkpoint()
        names = WireNames((t.name for t in request.tools), provider=self.PROVIDER)
        params = self._params(request, model_name(request, self.model, provider=self.PROVIDER))

        def renamed(delta: Delta) -> None:
            if delta.name:
                delta = msgspec.structs.replace(delta, name=names.from_wire(delta.name))
            on_delta(delta)

        try:
            body = await self._stream(params, renamed)
        except getattr(self._sdk, self._BASE_ERROR) as e:
            raise map_sdk_error(e, self._sdk, provider=self.PROVIDER) from e
        return self._response(body, names)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request, once; raise :class:`ModelError` when it fails.

        Tool names are mapped to the wire and back; a tool set that cannot be named on
        the wire raises :class:`ToolNameError` before anything is sent.
        """
        await trio.lowlevel.checkpoint()
        names = WireNames((t.name for t in request.tools), provider=self.PROVIDER)
        params = self._params(request, model_name(request, self.model, provider=self.PROVIDER))
        try:
            raw = await self._create(params)
        except getattr(self._sdk, self._BASE_ERROR) as e:
            raise map_sdk_error(e, self._sdk, provider=self.PROVIDER) from e
        body: bytes = raw.http_response.content
        return self._response(body, names)

    def _params(self, request: ModelRequest, model: str) -> dict[str, Any]:
        raise NotImplementedError

    async def _stream(self, params: dict[str, Any], on_delta: DeltaSink) -> bytes:
        raise NotImplementedError

    async def _create(self, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _response(self, body: bytes, names: WireNames) -> ModelResponse:
        raise NotImplementedError
