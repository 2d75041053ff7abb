"""Rescanning skill sources cheaply, for sessions that watch them between turns.

A :class:`SkillWatcher` keeps a private in-memory :class:`SkillIndex`, so each scan
stats every file and reads only skills whose stat fingerprint changed (the index's
racy-git rule re-reads trees modified within 2 s of a scan). What changed is decided
by the runtime against the catalog its session recorded, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ._catalog import Catalog, build_catalog
from ._config import SkillsConfig
from ._discover import SkillSource
from ._index import SkillIndex
from ._model import Tier


class SkillWatcher:
    """The sources a session rescans (``watch``), as the catalog was first built."""

    def __init__(
        self,
        sources: Sequence[SkillSource],
        *,
        config: SkillsConfig | None = None,
        refs: Sequence[str] = (),
        ref_tier: Tier = Tier.USER,
    ) -> None:
        self.sources = tuple(sources)
        self.config = config or SkillsConfig()
        self.refs = tuple(refs)
        self.ref_tier = ref_tier
        self._index = SkillIndex(":memory:")
        self._lock = trio.Lock()

    def scan(self) -> Catalog:
        """The catalog the sources hold now (reading only what changed since the
        last scan)."""
        return build_catalog(
            self.sources,
            config=self.config,
            refs=self.refs,
            ref_tier=self.ref_tier,
            index=self._index,
        )

    async def scan_async(self) -> Catalog:
        """:meth:`scan` on a worker thread, one at a time."""
        async with self._lock:
            return await trio.to_thread.run_sync(self.scan)

    def close(self) -> None:
        self._index.close()
