"""The built-in page (/) in a real headless browser: Debian's chromium through its chromedriver, driven by selenium.
A message sent from the page streams back into it; every cell of the KV map matches gRPC GetServerInfo's heads; the
tier lines match /metrics. A screenshot is kept in the build directory (tests/artifacts/web_ui.png). Without a
browser (Debian packages chromium, chromium-driver: scripts/install-deps.sh) the browser test skips, which CI
counts as a failure."""
import json
import os
import shutil
import time

import grpc
import pytest
from conftest import BIN, Daemon, metric_value

import requests_shim as http

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = BIN.parent / "tests" / "artifacts"


def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromedriver are not installed (Debian packages chromium, chromium-driver)")
    os.environ["SE_OFFLINE"] = "true"  # selenium must not look for drivers online: the Debian ones are given
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait_for(predicate, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def test_the_page_chats_and_maps_every_head(grpc_pb):
    m, g = grpc_pb
    d = Daemon()  # the default KV configuration: classes and tiers differ between heads
    driver = None
    try:
        driver = browser()
        from selenium.webdriver.common.by import By
        driver.get(d.url + "/")
        wait_for(lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-state-loaded") == "true",
                 "the page's first /kv/state")

        # The map against GetServerInfo, cell by cell.
        with grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}") as ch:
            info = g.InferenceStub(ch).GetServerInfo(m.GetServerInfoRequest())
        want = {(h.layer, h.kv_head): (h.precision_class.lower(), h.tier, h.format) for h in info.heads}
        assert len(want) == 30 * 3 and {c for c, _, _ in want.values()} == {"hot", "active", "sparse"}
        # The page redraws every second: read the cells in one script, from one drawing.
        cells = driver.execute_script("""
            return [...document.querySelectorAll('#map td')].map(c =>
                [+c.dataset.layer, +c.dataset.kvHead, c.dataset.class, c.dataset.tier, c.dataset.format]);
        """)
        got = {(layer, head): (cls, tier, fmt) for layer, head, cls, tier, fmt in cells}
        assert got == want

        # A message streams back: the assistant's line changes several times before the request ends.
        driver.execute_script("""
            window.tqUpdates = 0;
            new MutationObserver(() => { window.tqUpdates += 1; })
                .observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
        """)
        driver.find_element(By.ID, "prompt").send_keys("Tell me a short story about a cat.")
        driver.find_element(By.ID, "send").click()
        answer = wait_for(lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
                                        if e.get_attribute("data-done") == "true"), None), "the streamed answer")
        assert not driver.find_elements(By.CSS_SELECTOR, ".msg.error"), driver.page_source
        assert len(answer.text) > len("model: ") + 5, answer.text
        assert driver.execute_script("return window.tqUpdates") >= 4

        # The sampling controls reach the request: 5 tokens at temperature 0 end on the length limit.
        def set_field(element_id, value):
            field = driver.find_element(By.ID, element_id)
            field.clear()
            field.send_keys(value)

        set_field("temperature", "0")
        set_field("max-tokens", "5")
        driver.find_element(By.ID, "prompt").send_keys("Tell me another one.")
        driver.find_element(By.ID, "send").click()
        short = wait_for(lambda: next((e for e in driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1:]
                                       if e.get_attribute("data-done") == "true"), None), "the 5-token answer")
        assert short.get_attribute("data-finish-reason") == "length", driver.page_source
        assert short.get_attribute("data-completion-tokens") == "5"
        # An out-of-range value is the server's 400, shown as an error that names the field.
        set_field("temperature", "5")
        driver.find_element(By.ID, "prompt").send_keys("And one more.")
        driver.find_element(By.ID, "send").click()
        error = wait_for(lambda: next(iter(driver.find_elements(By.CSS_SELECTOR, ".msg.error")), None),
                         "the error line")
        assert "400" in error.text and "temperature" in error.text, error.text

        # Tier lines carry /metrics' numbers once the page has polled after the request.
        time.sleep(1.5)
        metrics = http.get(d.url + "/metrics").body.decode()
        lines = driver.execute_script("""
            return [...document.querySelectorAll('#tiers div[data-tier]')].map(l => [l.dataset.tier, l.textContent]);
        """)
        assert {tier for tier, _ in lines} == {"hot", "warm", "cold"}
        for tier, text in lines:
            pages = metric_value(metrics, "tqserve_kv_tier_pages", {"tier": tier})
            assert pages is not None and f"{int(pages)} pages" in text, (tier, text, pages)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(ARTIFACTS / "web_ui.png"))
    finally:
        if driver is not None:
            driver.quit()
        assert d.stop() == 0, d.logs()


def test_the_page_and_its_data_routes():
    keyed = Daemon(["--api-keys", "sesame"])
    try:
        page = http.get(keyed.url + "/")
        assert page.status == 200 and b"<title>tqserve</title>" in page.body
        assert page.headers.get("Content-Type", "").startswith("text/html")
        assert http.get(keyed.url + "/kv/state").status == 401
        state = http.get(keyed.url + "/kv/state", headers={"Authorization": "Bearer sesame"})
        assert state.status == 200
        body = json.loads(state.body)
        assert len(body["heads"]) == body["n_layers"] * body["n_kv_heads"] == 90
        assert http.post(keyed.url + "/kv/state", {}, headers={"Authorization": "Bearer sesame"}).status == 405
    finally:
        assert keyed.stop() == 0, keyed.logs()
    off = Daemon(["--web-ui", "false"])
    try:
        assert http.get(off.url + "/").status == 404
    finally:
        assert off.stop() == 0, off.logs()
