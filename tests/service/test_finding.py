"""Finding sessions: submitter, model and time filters and cursor pages, through the
API and the console's list (the same ``_finding`` under both); a filtered page reads a
bounded number of rows and its cursor continues where the reading stopped."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.service import _console_list
from orchestrator.service._finding import Filters, find

from .conftest import Service
from .test_api import submit


async def test_filters_and_pages(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = [await submit(service, "sam", f"sam's {n}") for n in range(3)]
    theirs = await submit(service, "alice", "alice's")
    today = datetime.now(UTC).date()
    async with service.client("victor") as client:

        async def listed(**params: str) -> list[str]:
            response = await client.get("/api/sessions", params=params)
            assert response.status_code == 200, response.text
            return [r["session"] for r in response.json()["sessions"]]

        assert await listed(submitter="sam") == mine[::-1]
        assert await listed(submitter="alice") == [theirs]
        assert await listed(submitter="nobody") == []
        assert len(await listed(model="scripted:turns.yaml")) == 4
        assert await listed(model="scripted:other.yaml") == []
        assert len(await listed(since=str(today), until=str(today))) == 4
        assert await listed(since=str(today + timedelta(days=1))) == []
        assert await listed(until=str(today - timedelta(days=1))) == []
        later = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
        assert len(await listed(until=later)) == 4
        bad = await client.get("/api/sessions", params={"since": "yesterday"})
        assert bad.status_code == 422 and bad.json()["field"] == "query.since"
        # Pages of one, filtered by submitter: every one of sam's, once, newest first.
        seen, cursor = [], None
        for _ in range(10):
            params = {"submitter": "sam", "limit": "1", **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/api/sessions", params=params)).json()
            seen += [r["session"] for r in page["sessions"]]
            cursor = page["next"]
            if cursor is None:
                break
        assert seen == mine[::-1]
        # The console: the same filters, a submitter column, pages linked.
        monkeypatch.setattr(_console_list, "PAGE", 2)
        html = (await client.get("/console", params={"submitter": "sam"})).text
        assert html.count('<tr data-state="') == 2 and "alice&#x27;s" not in html
        following = re.search(r'<a id="next" href="/console\?([^"]+)"', html)
        assert following is not None and "submitter=sam" in following.group(1)
        second = (await client.get("/console?" + following.group(1).replace("&amp;", "&"))).text
        assert second.count('<tr data-state="') == 1 and 'id="first"' in second
        assert "data-live" not in second  # only the first page refreshes itself
        rows = (await client.get("/console/rows", params={"submitter": "alice"})).text
        assert rows.count("<tr ") == 1 and theirs in rows


async def test_a_filtered_page_reads_a_bounded_number_of_rows(service: Service) -> None:
    sessions = [await submit(service, who, who) for who in ("sam", "alice", "alice", "sam")]
    # With two rows read per page, the first page of sam's finds the newest alone and
    # says where to go on; the pages together hold exactly sam's sessions.
    page, following = await find(service.store, Filters(submitter="sam"), 10, scan=2)
    assert [r.session for r in page] == [sessions[3]] and following is not None
    found = [r.session for r in page]
    while following is not None:
        after = _decode(following)
        page, following = await find(
            service.store, Filters(submitter="sam", after=after), 10, scan=2
        )
        found += [r.session for r in page]
    assert found == [sessions[3], sessions[0]]


def _decode(cursor: str) -> tuple[int, str]:
    from eventlog._catalog import decode_cursor

    return decode_cursor(cursor)
