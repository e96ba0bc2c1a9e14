"""Headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: requests on the child's fd 3, replies on fd 4,
each message JSON ended by a NUL byte), with the standard library only.
Used by tests/test_web.py and tools/web/bench.py."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(Exception):
    pass


class Browser:
    """One headless browser with one page; call() sends a command to the page."""

    def __init__(self, exe=None, width=1280, height=1700, timeout=60):
        exe = exe or find_chromium()
        if not exe:
            raise CdpError("no chromium on PATH")
        self.profile = tempfile.mkdtemp(prefix="mhe-web-")
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()

        def fds():  # the child's fd 3 reads our requests, fd 4 carries its replies
            r, w = os.dup(to_child_r), os.dup(from_child_w)   # out of the way of 3 and 4 first
            os.dup2(r, 3)
            os.dup2(w, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows", "--hide-scrollbars",
                "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height), "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=fds, close_fds=False,
                                     start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events = []
        self.timeout = timeout
        targets = self.call("Target.getTargets", session=False)["targetInfos"]
        page = [t for t in targets if t["type"] == "page"][0]
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        self.call("Runtime.enable")
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def _read(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0:
                raise CdpError("no reply from chromium in time")
            import select
            ready, _, _ = select.select([self._from_child_r], [], [], left)
            if ready:
                chunk = os.read(self._from_child_r, 1 << 20)
                if not chunk:
                    raise CdpError("chromium closed the pipe (exit %s)" % self.proc.poll())
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=True, timeout=None):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + (timeout or self.timeout)
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise CdpError("%s: %s" % (method, reply["error"].get("message")))
                return reply.get("result", {})
            self.events.append(reply)

    def navigate(self, url):
        self.call("Page.navigate", {"url": url})

    def eval(self, expr, timeout=None):
        """the value of a JS expression (a promise is awaited), as JSON"""
        r = self.call("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True},
                      timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CdpError("JS: %s" % (d.get("exception", {}).get("description") or d.get("text")))
        return r["result"].get("value")

    def wait(self, expr, timeout=30, every=0.1):
        """poll a JS expression until it is truthy; its value"""
        end = time.time() + timeout
        while True:
            v = self.eval(expr)
            if v:
                return v
            if time.time() > end:
                raise CdpError("timed out waiting for: " + expr)
            time.sleep(every)

    def set_files(self, selector, paths):
        """choose files in an <input type=file>, as a user would"""
        obj = self.call("Runtime.evaluate", {"expression": "document.querySelector(%s)" % json.dumps(selector)})
        self.call("DOM.setFileInputFiles", {"files": paths, "objectId": obj["result"]["objectId"]})

    def console_errors(self):
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(e["params"]["exceptionDetails"].get("exception", {}).get("description", "exception"))
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"]["args"]))
        return out

    def screenshot(self, path):
        """the page down to the end of its content, as PNG"""
        h = self.eval("Math.ceil(document.body.getBoundingClientRect().bottom) + 8")
        w = self.eval("document.documentElement.clientWidth")
        r = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                  "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child_w, self._from_child_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
