"""The numbers of docs/web.md: the page's download size, and steps per second
of the bundled tiny model (the page's default size) in headless Chromium,
with and without wasm SIMD, beside the same C built natively (one thread, as
one worker has). Run from the repository root after make web:
    python3 tools/web/bench.py [--steps 200] [--kinds mha,mhe-mul] [--repeat 2]
Builds build/web-nosimd (make web WEB_SIMD=0) and the native programs in
build/web-bench/; prints a Markdown table."""
import argparse
import base64
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "In the beginning God created"


def page_rate(b, page, kind, steps):
    b.navigate("file://" + page)
    b.wait("window.mhe && mhe.state.ready", 60)
    b.eval("(() => { const s = (id, v) => { const e = document.getElementById(id); e.value = v; "
           "e.dispatchEvent(new Event('change')); }; s('kindA', %s); s('steps', %d); "
           "document.getElementById('train').click(); return 1; })()" % (json.dumps(kind), steps))
    b.wait("mhe.panels.A.step == %d && !mhe.panels.A.training" % steps, 600)
    return b.eval("[mhe.panels.A.stepsPerSec, mhe.panels.A.config]")


def sizes(d):
    files = sorted(f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))
    raw = {f: os.path.getsize(os.path.join(d, f)) for f in files}
    gz = {f: len(gzip.compress(open(os.path.join(d, f), "rb").read(), 9)) for f in files}
    return raw, gz


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kinds", default="mha,mhe-mul")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    os.chdir(REPO)
    subprocess.run(["make", "-s", "web"], check=True)
    subprocess.run(["make", "-s", "web", "WEB_SIMD=0", "WEB_OUT=build/web-nosimd"], check=True)
    os.makedirs("build/web-bench", exist_ok=True)
    natives = {
        "native, -O2 -march=native (AVX2/AVX-512 kernels), 1 thread": ["-O2", "-march=native"],
        "native, -O2 -DMHE_NO_SIMD (the test's reference)": ["-O2", "-ffp-contract=off", "-DMHE_NO_SIMD"],
    }
    for i, (name, flags) in enumerate(natives.items()):
        subprocess.run(["cc"] + flags + ["-o", "build/web-bench/native%d" % i, "tools/web/web_native.c", "-lm"], check=True)
    with open("build/web/text.js") as f:
        text = base64.b64decode(re.search(r'MHE_TEXT_B64 = "([^"]*)"', f.read()).group(1))
    tmp = tempfile.mkdtemp()
    tpath = os.path.join(tmp, "text.txt")
    with open(tpath, "wb") as f:
        f.write(text)
    rows = []
    with cdp.Browser() as b:
        version = b.call("Browser.getVersion", session=False)["product"]
        for kind in a.kinds.split(","):
            config = None
            for label, d in (("browser, wasm SIMD (make web)", "build/web"), ("browser, wasm without SIMD (WEB_SIMD=0)", "build/web-nosimd")):
                best = 0
                for _ in range(a.repeat):
                    rate, config = page_rate(b, os.path.abspath(d + "/index.html"), kind, a.steps)
                    best = max(best, rate)
                rows.append((kind, label, best))
            for i, name in enumerate(natives):
                best = 0
                for _ in range(a.repeat):
                    p = subprocess.run(["build/web-bench/native%d" % i, config, tpath, "42", str(a.steps), PROMPT],
                                       capture_output=True, text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                    best = max(best, json.loads(p.stdout)["steps_per_s"])
                rows.append((kind, name, best))
    print("config: " + config.replace("\n", " ") + "; " + version)
    print("\n| kind | build | steps/s |\n|---|---|---|")
    for r in rows:
        print("| `%s` | %s | %.1f |" % r)
    for d in ("build/web", "build/web-nosimd"):
        raw, gz = sizes(d)
        print("\n%s: %s; total %d bytes, gzip -9 %d" % (d, ", ".join("%s %d (gzip %d)" % (f, raw[f], gz[f]) for f in raw),
                                                       sum(raw.values()), sum(gz.values())))
    wasm = "build/web-obj/mhe.wasm"
    print("%s: %d bytes, gzip -9 %d" % (wasm, os.path.getsize(wasm), len(gzip.compress(open(wasm, "rb").read(), 9))))


if __name__ == "__main__":
    main()
