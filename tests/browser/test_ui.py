"""The web page in a real browser against real `asr serve` processes on loopback.

What a person does with it: paste the key, create a session, send `[words:30]` and watch the
assistant text grow from delta frames and FINAL_OUTPUT arrive in the live timeline; fork at
an earlier event; answer a client tool call and an approval; filter, save, compact; search
sessions by metadata. Payloads that look like markup are shown as text. The page follows a
session live on replica A while the run is started through replica B.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser.conftest import ARTIFACTS, Page, start_ui_server, stop_and_check
from tests.conftest import Server, TenantKey

try:
    from playwright.async_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) these tests
    expect = None  # type: ignore[assignment]

FINAL = '.event[data-type="FINAL_OUTPUT"]'
WORDS_30 = " ".join(f"word{i}" for i in range(1, 31))


async def open_page(ui: Page, server: Server, tenant: TenantKey) -> Any:
    page = ui.page
    await page.goto(server.base_url + "/ui")
    await page.fill("#api-key", tenant.key)
    await page.click("#key-save")
    await expect(page.locator("#key-status")).to_have_text("key set (this tab only)")
    return page


async def create_session(page: Any, metadata: str = "") -> str:
    await page.fill("#create-metadata", metadata)
    async with page.expect_response(
        lambda r: r.url.endswith("/v1/sessions") and r.request.method == "POST"
    ) as created:
        await page.click("#create-session")
    sid = (await (await created.value).json())["session_id"]
    await expect(page.locator("#session-title")).to_have_text(sid)
    await expect(page.locator("#stream-state")).to_have_text("live")
    await expect(row(page, "SESSION_CREATED")).to_have_count(1)
    return sid


async def send(page: Any, text: str, mode: str, *, tools: str = "", approval: str = "") -> None:
    await page.fill("#run-input", text)
    await page.select_option("#run-mode", mode)
    await page.fill("#run-client-tools", tools)
    await page.fill("#run-approval", approval)
    await page.click("#run-send")


def row(page: Any, event_type: str) -> Any:
    return page.locator(f'#timeline .event[data-type="{event_type}"]')


# Records, at every change of the timeline, how long the live assistant text is and whether
# a FINAL_OUTPUT row exists yet: the proof that the text grew before the final answer.
OBSERVE = """() => {
  window.__growth = [];
  const timeline = document.getElementById("timeline");
  new MutationObserver(() => {
    const live = timeline.querySelector(".event.live .live-text");
    window.__growth.push({
      length: live ? live.textContent.length : 0,
      final: timeline.querySelector('.event[data-type="FINAL_OUTPUT"]') !== null,
    });
  }).observe(timeline, {childList: true, subtree: true, characterData: true});
}"""


async def test_live_timeline_deltas_final_output_and_fork(
    ui: Page, ui_server: Server, tenant: TenantKey
) -> None:
    page = await open_page(ui, ui_server, tenant)
    sid = await create_session(page, "suite=browser, case=live")
    await expect(row(page, "SESSION_CREATED")).to_have_count(1)
    await expect(page.locator("#session-list [data-session-id]")).to_have_count(1)

    await page.evaluate(OBSERVE)
    # Paced, so the text grows over several writer ticks: unpaced, the words after the first
    # come in one frame right before FINAL_OUTPUT, and a busy browser may show both at once.
    await send(page, "[words:30][pace:20]", "stream")
    await expect(page.locator(".event.live .live-text")).to_have_text(WORDS_30)
    await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(WORDS_30)
    await expect(row(page, "RUN_FINISHED").locator(".summary")).to_have_text("finished · COMPLETED")
    await expect(page.locator("#run-stop")).to_have_text("COMPLETED")
    # The row keeps the first source's frames: the POST's run stream (a frame per word) or
    # the timeline's (coalesced: the first word at once, the rest within 25 ms).
    assert int(await page.locator(".event.live").get_attribute("data-frames")) >= 2

    growth = await page.evaluate("window.__growth")
    before_final = [g["length"] for g in growth if not g["final"] and g["length"]]
    # The text was built up frame by frame, and was there (growing) before FINAL_OUTPUT.
    assert len(set(before_final)) >= 2, growth
    assert before_final == sorted(before_final), growth
    assert max(before_final) == len(WORDS_30), growth

    # Every event of the run is in the timeline, in seq order, each once.
    seqs = [
        int(s)
        for s in await page.locator("#timeline .event[data-seq]").evaluate_all(
            "rows => rows.map(r => r.dataset.seq)"
        )
    ]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 10
    # Expandable payload: hidden until asked for, then the event's JSON.
    final_row = row(page, "FINAL_OUTPUT")
    await expect(final_row.locator(".payload")).to_be_hidden()
    await final_row.locator(".toggle").click()
    await expect(final_row.locator(".payload")).to_be_visible()
    assert json.loads(await final_row.locator(".payload").inner_text()) == {"text": WORDS_30}
    assert "run …" in await final_row.locator(".ids").inner_text()
    # The display snapshot followed the run: usage and tokens are there.
    await expect(page.locator('#snapshot [data-field="usage"]')).to_contain_text("total_tokens")
    await expect(page.locator('#snapshot [data-field="last seq"]')).to_have_text(str(seqs[-1]))

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-timeline.png"
    await page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot of the live timeline: {shot}")

    # Fork at an earlier event (the user's input): the child opens with its own timeline.
    user_input = row(page, "USER_INPUT")
    at = int(await user_input.get_attribute("data-seq"))
    await user_input.locator(".fork-here").click()
    await expect(page.locator("#fork-seq")).to_have_value(str(at))
    await page.click("#fork-session")
    await expect(page.locator("#session-title")).not_to_have_text(sid)
    child = await page.locator("#session-title").inner_text()
    await expect(page.locator("#session-lineage")).to_have_text(f"forked from {sid} at seq {at}")
    await expect(page.locator("#stream-state")).to_have_text("live")
    forked = row(page, "SESSION_FORKED")
    await expect(forked).to_have_attribute("data-seq", str(at + 1))
    await expect(forked.locator(".summary")).to_have_text(f"from {sid} at seq {at}")
    await expect(row(page, "FINAL_OUTPUT")).to_have_count(0)  # forked before the answer

    # The child runs on its own (background mode: the timeline alone shows it).
    await send(page, "[words:5]", "background")
    await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(
        "word1 word2 word3 word4 word5"
    )
    await expect(page.locator("#run-stop")).to_have_text("COMPLETED")
    last = await row(page, "RUN_FINISHED").get_attribute("data-seq")
    await expect(page.locator('#snapshot [data-field="last seq"]')).to_have_text(str(last))
    await page.screenshot(path=str(ARTIFACTS / "ui-fork.png"), full_page=True)
    assert child != sid

    # The key stayed out of every URL and out of localStorage; the tab's sessionStorage has it.
    assert not [u for u in ui.watch.urls if tenant.key in u]
    assert any("token=" in u and "/events/stream" in u for u in ui.watch.urls)
    assert await page.evaluate("sessionStorage.getItem('asr.apiKey')") == tenant.key
    assert await page.evaluate("localStorage.length") == 0


async def test_payloads_that_look_like_markup_are_shown_as_text(
    ui: Page, ui_server: Server, tenant: TenantKey
) -> None:
    script = "<script>window.__pwned = 'script'</script>"
    img = "<img src=x onerror=\"window.__pwned = 'img'\">"
    async with httpx.AsyncClient(base_url=ui_server.base_url, headers=tenant.headers) as http:
        created = await http.post("/v1/sessions", json={"metadata": {"note": img}})
        sid = created.json()["session_id"]
        items = [
            {"type": "message", "role": "user", "content": script},
            {"type": "message", "role": "assistant", "content": img},
        ]
        appended = await http.post(f"/v1/sessions/{sid}/items", json={"items": items})
        assert appended.status_code == 201, appended.text

    page = await open_page(ui, ui_server, tenant)
    listed = page.locator(f'#session-list [data-session-id="{sid}"]')
    await expect(listed.locator(".meta")).to_have_text(f"note={img}")
    await listed.click()
    appended_row = row(page, "MEMORY_ITEMS_APPENDED")
    await expect(appended_row.locator(".summary")).to_have_text(
        f"user: {script} | assistant: {img}"
    )
    await appended_row.locator(".toggle").click()
    await expect(appended_row.locator(".payload")).to_contain_text(script)

    # Through a run too: the echo comes back as delta text and as FINAL_OUTPUT.
    await send(page, img, "stream")
    await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(f"echo: {img}")
    await expect(page.locator(".event.live .live-text")).to_have_text(f"echo: {img}")
    await expect(page.locator("#snapshot [data-field='metadata']")).to_have_text(f"note={img}")

    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("img").count() == 0
    assert await page.locator("body script").count() == 0  # only the head's app.js exists
    assert await page.locator("script").count() == 1


async def test_pending_tool_call_and_approval_are_answered_from_the_page(
    ui: Page, ui_server: Server, tenant: TenantKey
) -> None:
    page = await open_page(ui, ui_server, tenant)
    await create_session(page)

    await send(page, '[tool:lookup {"q": "x"}]', "wait", tools="lookup")
    await expect(page.locator("#run-stop")).to_have_text("NEEDS_USER_INPUT")
    call = page.locator('#pending-list .pending-call[data-kind="client"]')
    await expect(call).to_have_count(1)
    await expect(call.locator("code")).to_have_text('lookup({"q": "x"})')
    await call.locator(".tool-output").fill("found it")
    await call.locator(".send-output").click()
    await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(
        "lookup returned: found it"
    )
    await expect(page.locator("#run-stop")).to_have_text("COMPLETED")
    await expect(page.locator("#pending")).to_be_hidden()

    await send(page, '[tool:echo {"text": "hi"}]', "background", approval="echo")
    await expect(page.locator("#run-stop")).to_have_text("BLOCKED_BY_APPROVAL")
    await expect(row(page, "APPROVAL_REQUESTED")).to_have_count(1)
    approval = page.locator('#pending-list .pending-call[data-kind="approval"]')
    await expect(approval.locator("code")).to_have_text('echo({"text": "hi"})')
    await approval.locator(".approve").click()
    await expect(row(page, "APPROVAL_DECIDED").locator(".summary")).to_contain_text("approve")
    await expect(row(page, "FINAL_OUTPUT")).to_have_count(2)
    await expect(row(page, "FINAL_OUTPUT").last.locator(".summary")).to_contain_text(
        "echo returned"
    )
    await expect(page.locator("#run-stop")).to_have_text("COMPLETED")


async def test_search_filter_save_compact_and_snapshot(
    ui: Page, ui_server: Server, tenant: TenantKey
) -> None:
    page = await open_page(ui, ui_server, tenant)
    await create_session(page, "user=bob")
    sid = await create_session(page, "user=alice, team=red")
    await expect(page.locator("#session-list [data-session-id]")).to_have_count(2)

    await page.fill("#search-metadata", "user=alice")
    await page.click("#search-go")
    await expect(page.locator("#session-list [data-session-id]")).to_have_count(1)
    await expect(page.locator("#session-list [data-session-id] .sid")).to_have_text(sid)
    await page.fill("#search-metadata", "user=alice, team=blue")
    await page.click("#search-go")
    await expect(page.locator("#session-list [data-session-id]")).to_have_count(0)

    for text in ("one", "two", "three"):
        await send(page, text, "wait")
        await expect(page.locator("#run-output")).to_have_text(f"echo: {text}")
    await expect(row(page, "FINAL_OUTPUT")).to_have_count(3)

    await page.click("#save-session")
    await expect(row(page, "SESSION_SAVED")).to_have_count(1)
    await expect(page.locator("#notice")).to_contain_text("Saved")

    await page.select_option("#compact-strategy", "truncate")
    await page.click("#compact-session")
    await expect(row(page, "MEMORY_COMPRESS")).to_have_count(1)
    await expect(page.locator("#notice")).to_contain_text("Compacted")
    snapshot = page.locator("#snapshot")
    await expect(snapshot.locator('[data-field="breaker"]')).to_contain_text('"open":false')
    await expect(snapshot.locator('[data-field="last compact"]')).to_contain_text("truncate")
    await expect(snapshot.locator('[data-field="estimated tokens"]')).to_have_text(
        re.compile(r"^\d+$")
    )

    await page.select_option("#type-filter", "FINAL_OUTPUT")
    visible = page.locator("#timeline .event:visible")
    await expect(visible).to_have_count(3)
    assert set(await visible.evaluate_all("rows => rows.map(r => r.dataset.type)")) == {
        "FINAL_OUTPUT"
    }
    total = await page.locator("#timeline .event").count()
    await expect(page.locator("#timeline-count")).to_have_text(f"3 of {total} shown")
    # New events obey the filter as they arrive.
    await send(page, "four", "wait")
    await expect(visible).to_have_count(4)
    await page.select_option("#type-filter", "")
    await expect(visible).to_have_count(await page.locator("#timeline .event").count())


# ------------------------------------------------------------------ two replicas


@pytest.fixture(scope="module")
def replica_b(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_ui_server(database_url, tmp_path_factory.mktemp("ui-b") / "b.log")
    yield srv
    stop_and_check(srv)


async def test_timeline_on_replica_a_fills_live_with_a_run_started_on_replica_b(
    ui: Page, ui_server: Server, replica_b: Server, tenant: TenantKey, database_url: str
) -> None:
    page = await open_page(ui, ui_server, tenant)
    sid = await create_session(page, "case=replicas")
    await expect(row(page, "SESSION_CREATED")).to_have_count(1)

    async with httpx.AsyncClient(
        base_url=replica_b.base_url, headers=tenant.headers, timeout=15
    ) as b:
        response = await b.post(
            f"/v1/sessions/{sid}/runs", json={"input": "[words:30]", "mode": "background"}
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        await expect(row(page, "RUN_FINISHED").locator(".summary")).to_have_text(
            "finished · COMPLETED"
        )
        await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(WORDS_30)
        ledger = (await b.get(f"/v1/sessions/{sid}/events", params={"limit": 100})).json()

    # A's page shows exactly B's ledger: every event, in order, each once.
    seqs = await page.locator("#timeline .event[data-seq]").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.seq))"
    )
    assert seqs == [e["seq"] for e in ledger["data"]]
    ids = await row(page, "FINAL_OUTPUT").locator(".ids").get_attribute("title")
    assert ids is not None and ids.startswith(run_id)
    if not database_url.startswith("postgresql"):
        # SQLite: two processes share only the file; deltas stay in the model's process.
        await expect(page.locator(".event.live")).to_have_count(0)
    await expect(page.locator("#run-stop")).to_have_text("COMPLETED")


async def test_issue_16_assistant_row_fills_from_deltas_on_the_non_owner_replica(
    ui: Page, ui_server: Server, replica_b: Server, tenant: TenantKey, database_url: str
) -> None:
    """Issue #16: the page on replica A shows the text of a run that replica B executes, as
    it is written (deltas relayed by NOTIFY), before FINAL_OUTPUT; it used to show nothing
    until FINAL_OUTPUT. A page opened mid-turn starts from the text so far (catch-up)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("deltas cross replicas through PostgreSQL NOTIFY")
    page = await open_page(ui, ui_server, tenant)
    sid = await create_session(page, "case=remote-deltas")
    await page.evaluate(OBSERVE)
    async with httpx.AsyncClient(
        base_url=replica_b.base_url, headers=tenant.headers, timeout=15
    ) as b:
        # 30 words 40 ms apart on B: about 1.2 s of text arriving on A.
        response = await b.post(
            f"/v1/sessions/{sid}/runs",
            json={"input": "[words:30][pace:40]", "mode": "background"},
        )
        assert response.status_code == 202, response.text
        await expect(page.locator(".event.live .live-text")).to_have_text(WORDS_30)
        await expect(row(page, "FINAL_OUTPUT").locator(".summary")).to_have_text(WORDS_30)
    growth = await page.evaluate("window.__growth")
    before_final = [g["length"] for g in growth if not g["final"] and g["length"]]
    # The row grew from several delta frames, and held the whole text before FINAL_OUTPUT.
    assert len(set(before_final)) >= 3, growth
    assert before_final == sorted(before_final), growth
    assert max(before_final) == len(WORDS_30), growth

    # A second page opened on A while B is mid-turn starts with the text so far.
    async with httpx.AsyncClient(
        base_url=replica_b.base_url, headers=tenant.headers, timeout=15
    ) as b:
        response = await b.post(
            f"/v1/sessions/{sid}/runs",
            json={"input": "[words:30][pace:150]", "mode": "background"},
        )
        assert response.status_code == 202, response.text
        await expect(row(page, "RUN_STARTED")).to_have_count(2)
        await page.wait_for_timeout(600)  # some words written before the page is opened
        late = await open_page(Page(await ui.page.context.new_page(), ui.watch), ui_server, tenant)
        await late.click("#search-go")
        await late.click(f'#session-list [data-session-id="{sid}"]')
        await expect(late.locator(FINAL)).to_have_count(2)
    texts = await late.locator(".event.live .live-text").all_inner_texts()
    assert texts == [WORDS_30], texts  # the second turn, whole: catch-up plus the rest
