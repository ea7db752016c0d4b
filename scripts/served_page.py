"""Drives the served page in headless Chromium through chromedriver's
WebDriver API (plain HTTP, no client library), for what the browser tests
cannot see: they build the page as one module, while the served page
fetches its second module (headroom-panels) when it is first asked for.

    python3 scripts/served_page.py http://127.0.0.1:PORT

Checks that the page answers without the second module, that importing a
config.json fetches it and imports the model, that pasted TrainingArguments
set the form through it, and that the advice panel shows suggestions from
it. Exits non-zero with what it saw otherwise.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

W3C_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
CONFIG = json.dumps({
    "model_type": "llama", "_name_or_path": "served-page/tiny-llama", "vocab_size": 32000,
    "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
    "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
})


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Driver:
    def __init__(self, driver_url):
        self.url = driver_url
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800",
                "--user-data-dir=" + tempfile.mkdtemp()]
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": args}}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)["value"]

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def script(self, source, *args):
        return self.s("POST", "/execute/sync", {"script": source, "args": list(args)})

    def testid(self, name):
        return self.script(
            "const e = document.querySelector(`[data-testid=\"${arguments[0]}\"]`);"
            "return e ? e.textContent : null;", name)

    def element(self, name):
        found = self.s("POST", "/element", {"using": "css selector", "value": f'[data-testid="{name}"]'})
        return found[W3C_ELEMENT]

    def wait(self, what, check, seconds=60):
        end = time.time() + seconds
        while time.time() < end:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        fail(f"waited {seconds} s for {what}")

    def close(self):
        self.call("DELETE", f"/session/{self.session}")


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def panels_fetched(d):
    return d.script("return performance.getEntriesByType('resource')"
                    ".some(e => e.name.includes('headroom-panels'));")


def main():
    base = sys.argv[1].rstrip("/")
    port = free_port()
    chromedriver = subprocess.Popen([os.environ.get("CHROMEDRIVER", "chromedriver"), f"--port={port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        d = Driver(f"http://127.0.0.1:{port}")
        try:
            check(d, base)
        finally:
            d.close()
    finally:
        chromedriver.kill()


def check(d, base):
    d.s("POST", "/url", {"url": base + "/?model=llama-3.1-8b&seq_len=4096"})
    peak = d.wait("the first answer", lambda: d.testid("peak-total"))
    if panels_fetched(d):
        fail("the page fetched its second module before anything asked for it")
    print(f"  first answer {peak.strip()}, second module not fetched")

    area = d.element("hf-config")
    d.s("POST", f"/element/{area}/clear", {})
    d.script("const a = document.querySelector('[data-testid=\"hf-config\"]'); a.value = arguments[0];"
             "a.dispatchEvent(new Event('input', {bubbles: true}));", CONFIG)
    d.s("POST", f"/element/{d.element('hf-import')}/click", {})
    summary = d.wait("the imported model", lambda: (d.testid("model-summary") or "")
                     if "served-page/tiny-llama" in (d.testid("model-summary") or "")
                     else (fail("import refused: " + d.testid("hf-error")) if d.testid("hf-error") else None))
    if not panels_fetched(d):
        fail("the config.json was imported without the second module")
    print(f"  imported through the second module: {summary.strip()}")

    d.script("const a = document.querySelector('[data-testid=\"framework-args\"]'); a.value = arguments[0];",
             json.dumps({"per_device_train_batch_size": 4, "bf16": True, "gradient_checkpointing": True}))
    # Inside the closed "How do you run it?" details: clicked by script.
    d.script("document.querySelector('[data-testid=\"framework-apply\"]').click();")
    def read_out():
        said = (d.testid("framework-status") or "").strip()
        return said if said and not said.startswith("Reading") else None
    status = d.wait("the Trainer's arguments read", read_out)
    batch = d.script("return document.querySelector('[data-testid=\"batch\"]').value;")
    if "Applied" not in status or batch != "4":
        fail(f"the Trainer's arguments: {status!r}, batch {batch!r}")
    print("  TrainingArguments read through the second module: batch 4")

    d.s("POST", "/url", {"url": base + "/?model=llama-3.2-1b&mode=training&seq_len=4096&batch=16"})
    d.wait("the GPU table", lambda: d.testid("advise-rtx-4090"))
    d.s("POST", f"/element/{d.element('advise-rtx-4090')}/click", {})
    first = d.wait("a suggestion", lambda: d.testid("suggestion-words")
                   or (fail("advice failed: " + d.testid("advice")) if d.testid("advice-none")
                       or d.testid("advice-error") else None))
    print(f"  advice from the second module: {first.strip()}")


if __name__ == "__main__":
    main()
