"""The console in a real browser (issue 31): Debian's Chromium, headless,
driven through PyPI's playwright, against a running vigil.

    console_test.py BASE_URL TOKEN SHOTS_DIR

BASE_URL is the host's --control-tcp listener (http://127.0.0.1:PORT),
TOKEN its token, SHOTS_DIR where the screenshots of each view go. Prints
one JSON object: the checks made, the problems found (none: the console
works), and the screenshots. ConsoleBrowserTests runs it against the
real binary with manifests/default.yaml.
"""

import json
import sys
import time

from playwright.sync_api import sync_playwright

BASE, TOKEN, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
checks, problems, shots = [], [], []


def check(ok, what):
    checks.append(what)
    if not ok:
        problems.append(what)
    return ok


def shoot(page, name):
    path = f"{SHOTS}/{name}.png"
    page.screenshot(path=path, full_page=True)
    shots.append(path)


def api(page, path, method="GET"):
    """The API as the page's own session sees it (its cookie)."""
    response = page.request.fetch(BASE + path, method=method, headers={"Authorization": f"Bearer {TOKEN}"})
    return response.status, (response.json() if response.headers.get("content-type", "").startswith("application/json") else None)


def watch(page, expected_refusals):
    """Console errors, page errors, failed requests and answers >= 400,
    but for the refusals the test asks for (`expected_refusals`: (status,
    path) pairs, each allowed once)."""
    console_allowed = [status for status, _ in expected_refusals]

    def on_console(message):
        if message.type != "error":
            return
        # Chromium logs each refused request ("…responded with a status of 401"): those asked for are not problems.
        for status in console_allowed:
            if f"status of {status}" in message.text:
                console_allowed.remove(status)
                return
        problems.append(f"console error: {message.text}")

    def on_response(response):
        if response.status < 400:
            return
        path = response.url[len(BASE):]
        for i, (status, expected) in enumerate(expected_refusals):
            if status == response.status and path.startswith(expected):
                del expected_refusals[i]
                return
        problems.append(f"request answered {response.status}: {response.request.method} {path}")

    def on_failed(request):
        # A view left closes its stream: the browser aborts it. Nothing else may fail.
        if "/v1/stream" in request.url and "ERR_ABORTED" in (request.failure or ""):
            return
        problems.append(f"request failed: {request.method} {request.url} ({request.failure})")

    # (Playwright's string predicates would be eval'd in the page, which the console's CSP forbids: they are functions.)
    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("response", on_response)
    page.on("requestfailed", on_failed)


def chart_matches_query(page, field):
    """The chart of `field` draws what /v1/query answers for each of its series."""
    charts = page.evaluate(
        "vigilConsole.charts.map(c => ({field: c.field, series: c.series,"
        " rows: Array.from({length: c.graph.numRows()}, (_, r) =>"
        " Array.from({length: c.series.length + 1}, (_, k) => { const v = c.graph.getValue(r, k); return v === null || Number.isNaN(v) ? null : +v; }))}))")
    chart = next((c for c in charts if c["field"] == field), None)
    if not check(chart is not None, f"a chart of {field}: {[c['field'] for c in charts]}"):
        return
    matched = 0
    for column, series in enumerate(chart["series"], start=1):
        status, answer = api(page, f"/v1/query?series={series}&from=-5m")
        # (The chart's window began a moment before the query's.)
        drawn = {row[0]: row[column] for row in chart["rows"] if row[column] is not None and row[0] >= answer["from"]}
        kept = {int(p[0]): p[1] for p in answer["points"]}
        both = set(drawn) & set(kept)
        # The chart was drawn a moment before the query: every point it has must be the query's.
        wrong = [t for t in both if abs(drawn[t] - kept[t]) > 1e-9 * max(1, abs(kept[t]))]
        check(not wrong, f"{field} {series}: drawn values equal /v1/query's ({len(wrong)} differ)")
        check(len(set(drawn) - set(kept)) == 0, f"{field} {series}: no point drawn that /v1/query lacks")
        matched += len(both)
    check(matched >= 3, f"{field}: {matched} points drawn and answered alike")


def main():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        refusals = [(401, "/v1/session")]  # the wrong token below
        watch(page, refusals)

        # The log-in: a wrong token refused, the right one let in, kept in an HttpOnly cookie.
        page.goto(BASE + "/")
        page.wait_for_selector("#login:visible")
        shoot(page, "login")
        page.fill("#token", "not-the-token-0123456789")
        page.press("#token", "Enter")
        page.wait_for_function("() => document.querySelector('#login-error').textContent.length > 0")
        check("not accepted" in page.text_content("#login-error"), f"a wrong token is refused: {page.text_content('#login-error')!r}")
        check(not context.cookies(), "no cookie for a wrong token")
        page.fill("#token", TOKEN)
        page.press("#token", "Enter")
        page.wait_for_selector("#monitors tbody tr[data-monitor]")
        cookie = next((c for c in context.cookies() if c["name"] == "vigil_session"), None)
        check(cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict", f"the session cookie: {cookie}")
        check(cookie is not None and TOKEN not in cookie["value"] and TOKEN.encode().hex() not in cookie["value"],
              "the cookie holds a session's id, never the token")
        check(page.evaluate("document.cookie").find("vigil_session") < 0, "the page's script cannot read the session")

        # The overview: every monitor of the manifest, every sink, the host's figures.
        status, body = api(page, "/v1/status")
        monitors = [m["name"] for m in body["monitors"]]
        sinks = [s["name"] for s in body["sinks"]]
        for name in monitors:
            check(page.locator(f"#monitors tr[data-monitor='{name}']").count() == 1, f"overview shows monitor {name}")
        for name in sinks:
            check(page.locator(f"#sinks tr[data-sink='{name}']").count() == 1, f"overview shows sink {name}")
        # A remote_write sink's row: where it sends, its shards, its retries and why.
        for s in body["sinks"]:
            q = s.get("send_queue")
            if not q:
                continue
            row = page.locator(f"#sinks tr[data-sink='{s['name']}']")
            page.wait_for_function("(name) => /shards? \\(/.test(document.querySelector(`#sinks tr[data-sink='${name}']`).textContent)",
                                   arg=s["name"], timeout=10000)
            text = row.text_content()
            check(q["url"] in text and "shard (1–50)" in text, f"the remote_write row shows its receiver and shards: {text!r}")
            if q.get("retries"):
                check("samples)" in text, f"the remote_write row shows its retries: {text!r}")
        page.wait_for_function("() => document.querySelectorAll('#monitors .spark canvas').length > 0", timeout=15000)
        page.wait_for_timeout(2500)  # a second status: events/s and CPU %
        check("%" in page.text_content("#host"), f"the host's CPU: {page.text_content('#host')[:200]!r}")
        check(page.get_attribute("#health", "data-status") in ("ok", "unhealthy"), "the health badge")
        shoot(page, "overview-1280-light")
        page.click("#theme")
        check(page.evaluate("document.documentElement.dataset.theme") == "dark", "the dark theme")
        shoot(page, "overview-1280-dark")
        for width, height in ((360, 800), (3840, 2160)):
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(300)
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            check(overflow <= 0, f"at {width} px nothing overflows the page sideways ({overflow} px)")
            shoot(page, f"overview-{width}-dark")
        page.set_viewport_size({"width": 1280, "height": 800})
        page.click("#theme")

        # Keyboard: Tab reaches the skip link, the navigation, the theme, the
        # log-out and each monitor's link, each with a visible focus ring;
        # Enter on a monitor's link opens it.
        page.goto(BASE + "/#/")
        page.wait_for_selector("#monitors tbody tr[data-monitor]")
        reached, ringless = set(), []
        for _ in range(80):
            page.keyboard.press("Tab")
            who = page.evaluate("""() => { const e = document.activeElement;
                const ring = getComputedStyle(e).outlineStyle !== 'none' || getComputedStyle(e).boxShadow !== 'none';
                return [e.tagName + (e.id ? '#' + e.id : '') + (e.getAttribute('href') ? '[' + e.getAttribute('href') + ']' : '')
                        + (e.classList.contains('skip-link') ? '.skip-link' : ''), ring]; }""")
            reached.add(who[0])
            if not who[1] and who[0] != "BODY":  # past the last element, focus leaves the page
                ringless.append(who[0])
        wanted = ["A[#view].skip-link", "A[#/]", "A[#/events]", "A[#/rules]", "A[#/manifest]", "BUTTON#theme", "BUTTON#logout",
                  "A[#/monitor/cpu]"]
        missing = [w for w in wanted if not any(r.startswith(w.split(".")[0]) and (not w.endswith(".skip-link") or r.endswith(".skip-link")) for r in reached)]
        check(not missing, f"Tab reaches {wanted}: missing {missing} (reached {sorted(reached)})")
        check(not ringless, f"every focused element shows it: {sorted(set(ringless))}")
        page.focus("#monitors a[href='#/monitor/memory']")
        page.keyboard.press("Enter")
        page.wait_for_selector("section#monitor[data-monitor=memory]")
        check(True, "Enter opens a monitor")

        # A monitor: its charts draw what /v1/query answers; poll brings a new point within 2 s.
        page.goto(BASE + "/#/")
        page.click("#monitors a[href='#/monitor/cpu']")
        page.wait_for_selector("section#monitor[data-charts=ready]")
        page.wait_for_timeout(1500)
        chart_matches_query(page, "usage")
        check(page.locator("pre#monitor-manifest").text_content().strip().startswith("cpu:"), "the monitor's manifest section")
        shoot(page, "monitor-cpu-1280-light")
        page.goto(BASE + "/#/monitor/load")
        page.wait_for_selector("section#monitor[data-monitor=load][data-charts=ready]")
        page.wait_for_timeout(1200)  # the stream is open
        last = "(() => { const c = vigilConsole.charts.find(c => c.field === 'load1'); return c.graph.getValue(c.graph.numRows() - 1, 0); })()"
        before = page.evaluate(last)
        pressed = time.time() * 1000
        page.click("button[data-action=poll]")
        try:
            page.wait_for_function(f"() => {last} > {before}", timeout=2000)
            arrived = time.time() * 1000
            check(True, f"poll: a new point drawn {arrived - pressed:.0f} ms after the press")
        except Exception:
            check(False, "poll: no new point drawn within 2 s")
        check("202" in page.text_content("#action-result") or "poll" in page.text_content("#action-result").lower(),
              f"the poll's answer shown: {page.text_content('#action-result')!r}")
        for r in ("1h", "24h", "5m"):
            page.click(f"button[data-range='{r}']")
            page.wait_for_selector("section#monitor[data-charts=ready]")
            check(page.get_attribute(f"button[data-range='{r}']", "aria-pressed") == "true", f"range {r}")
        shoot(page, "monitor-load-1280-light")

        # Events: live, filtered.
        page.goto(BASE + "/#/events")
        page.wait_for_selector("#event-list tbody tr[data-seq]")
        page.wait_for_timeout(1000)
        newest = page.evaluate("Math.max(...[...document.querySelectorAll('#event-list tbody tr[data-seq]')].map(r => +r.dataset.seq))")
        api(page, "/v1/monitors/load/poll", method="POST")
        try:
            page.wait_for_function(
                f"() => [...document.querySelectorAll('#event-list tbody tr[data-seq]')].some(r => +r.dataset.seq > {newest} && r.textContent.includes('load'))",
                timeout=3000)
            check(True, "a live event arrived in the events view")
        except Exception:
            check(False, "no live event in the events view within 3 s")
        page.fill("#filter-monitor", "memory")
        page.wait_for_timeout(300)
        shown = page.evaluate("[...document.querySelectorAll('#event-list tbody tr[data-seq]')].filter(r => !r.hidden).map(r => r.textContent)")
        check(all("memory" in text for text in shown), f"the monitor filter: {len(shown)} rows shown")
        page.fill("#filter-monitor", "")
        shoot(page, "events-1280-light")

        page.goto(BASE + "/#/rules")
        page.wait_for_selector("section#rules table#thresholds")
        shoot(page, "rules-1280-light")
        page.goto(BASE + "/#/manifest")
        page.wait_for_selector("section#manifest pre.manifest-file")
        files = page.locator("pre.manifest-file").all_text_contents()
        check(any("monitors:" in f for f in files) and any("include:" in f for f in files),
              f"the manifest view shows the manifest and its included file: {[f[:80] for f in files]!r}")
        shoot(page, "manifest-1280-light")

        # Log out: the log-in again, and the API refuses the old page.
        page.goto(BASE + "/#/")
        page.wait_for_selector("#monitors tbody tr[data-monitor]")
        page.click("#logout")
        page.wait_for_selector("#login:visible")
        check(not [c for c in context.cookies() if c["name"] == "vigil_session" and c["value"]], "log-out clears the cookie")
        if cookie is not None:
            # The session ended on the host too: a copy of the cookie is no longer let in.
            copied = page.request.fetch(BASE + "/v1/status", headers={"Cookie": f"vigil_session={cookie['value']}"})
            check(copied.status == 401, f"a copy of the logged-out cookie is refused ({copied.status})")
        page.wait_for_timeout(500)
        browser.close()
    check(not refusals, f"the refusals asked for were seen: {refusals} left")
    print(json.dumps({"checks": len(checks), "problems": problems, "screenshots": shots}))


if __name__ == "__main__":
    main()
