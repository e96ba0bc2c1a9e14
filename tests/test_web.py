"""The browser page (make web, docs/web.md) in headless Chromium, driven as a
user would through the DevTools protocol (tools/web/cdp.py, standard library
only), against the same C built natively (build/web-native/web_native: gcc,
the scalar kernel, no FMA contraction):

  - mha and mhe-mul side by side, 40 steps on the bundled text at the same
    seed: the loss falls; every loss and every logit of one prompt equal the
    native build's within 1e-5 (they are bit for bit equal: see docs/web.md);
    every softmax map's rows sum to 1 and see no future key, and the maps
    equal the native ones; the page's timers keep ticking while it trains
  - every one of the 17 kinds trains a few steps and shows its maps, or what
    it mixes instead, or says it has none
  - text that is empty, too short, binary or too long, Stop, and a kind
    changed during training: a message on the page, nothing stuck
  - a screenshot (build/web-test/page.png; --screenshot PATH elsewhere)
  - tests/test_gemm.c built with the page's flags and run in the browser: the
    WebAssembly SIMD128 micro-kernel against double precision

Skipped where Chromium or clang's wasm32-wasi toolchain is missing.
  python3 tests/test_web.py [--steps N] [--screenshot PATH]"""
import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mhetest  # noqa: E402
from mhetest import check  # noqa: E402

sys.path.insert(0, mhetest.repo_path("tools/web"))
import cdp  # noqa: E402

NAME = "test_web.py"
PROMPT = "In the beginning God created"
KINDS17 = ["mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul", "mlp", "taylor", "nonapprox",
           "rndemb-qk", "fixedseq-qk", "staticemb-qk", "fnet", "linear", "collab"]
MAP_NONE, MAP_PROBS, MAP_IDENTITY, MAP_WEIGHTS = 0, 1, 2, 3


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def js(s):
    return json.dumps(s)


def set_value(b, id_, value):
    """a control set as a user would: its value, then a change event"""
    b.eval("(() => { const e = document.getElementById(%s); e.value = %s; e.dispatchEvent(new Event('change')); "
           "e.dispatchEvent(new Event('input')); return 1; })()" % (js(id_), js(str(value))))


def click(b, id_):
    b.eval("document.getElementById(%s).click(), 1" % js(id_))


def idle(b, timeout=120):
    b.wait("!mhe.panels.A.training && !mhe.panels.B.training", timeout)


def message(b):
    return b.eval("[mhe.state.message, mhe.state.messageKind]")


def native(build, config, text_path, seed, steps):
    p = subprocess.run([os.path.join(build, "web-native", "web_native"), config, text_path, str(seed), str(steps),
                        PROMPT], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("web_native: " + p.stderr.strip())
        return None
    return json.loads(p.stdout)


def rows_ok(maps, T, off, causal):
    """largest |row sum - 1| of one T x T map, and whether no row sees a later key"""
    worst, future = 0.0, 0.0
    for t in range(T):
        row = maps[off + t * T: off + (t + 1) * T]
        worst = max(worst, abs(sum(row) - 1.0))
        if causal:
            future = max([future] + [abs(v) for v in row[t + 1:]])
    return worst, future == 0.0


def side_by_side(b, build, text_path, steps, shot):
    set_value(b, "steps", steps)
    set_value(b, "seed", 42)
    set_value(b, "kindA", "mha")
    set_value(b, "kindB", "mhe-mul")
    set_value(b, "prompt", PROMPT)
    click(b, "train")
    b.wait("mhe.panels.A.training || mhe.panels.A.step > 0", 10)
    gap_during = 0
    while b.eval("mhe.panels.A.training || mhe.panels.B.training"):
        gap_during = max(gap_during, b.eval("mhe.state.maxGapMs"))
        time.sleep(0.2)
    b.wait("mhe.panels.A.maps && mhe.panels.B.maps && mhe.panels.A.maps.step == %d && mhe.panels.B.maps.step == %d"
           % (steps, steps), 20)
    check(not message(b)[0], "side by side: no message after training, got %r" % message(b)[0])
    check(gap_during < 1500, "the page kept ticking while two workers trained (longest timer gap %.0f ms)" % gap_during)
    print("longest gap between the page's 50 ms timer ticks while training: %.0f ms" % gap_during)
    status = b.eval("document.querySelector('#panelA .status').textContent")
    check(re.search(r"step %d, loss \d+\.\d+, \d+\.\d steps/s" % steps, status), "the status line shows step, loss, steps/s: %r" % status)
    for key, kind in (("A", "mha"), ("B", "mhe-mul")):
        p = b.eval("(() => { const p = mhe.panels.%s, m = p.maps; return {config: p.config, seed: p.seed, losses: p.losses, "
                   "sps: p.stepsPerSec, T: m.T, logits: Array.from(m.logits), maps: Array.from(m.maps), mapKind: m.mapKind, "
                   "layers: m.layers, heads: m.heads, canvases: document.querySelectorAll('#panel%s .maps canvas').length}; })()"
                   % (key, key))
        n = native(build, p["config"], text_path, p["seed"], steps)
        if not check(n is not None, kind + ": the native build ran"):
            continue
        loss = p["losses"]
        check(len(loss) == steps, "%s: %d losses shown (%d)" % (kind, steps, len(loss)))
        first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
        check(last < first - 1.0, "%s: the loss falls (mean of the first 5 steps %.3f, of the last 5 %.3f)" % (kind, first, last))
        dl = max(abs(f32(x) - f32(y)) for x, y in zip(loss, n["loss"]))
        check(len(n["loss"]) == len(loss) and dl <= 1e-5, "%s: losses equal the native build's (max diff %g)" % (kind, dl))
        T, V = p["T"], 256
        check(T == len(PROMPT) and len(p["logits"]) == T * V == len(n["logits"]), "%s: logits of the prompt, %d x %d" % (kind, T, V))
        d = max(abs(f32(x) - f32(y)) for x, y in zip(p["logits"], n["logits"]))
        same = sum(f32(x) == f32(y) for x, y in zip(p["logits"], n["logits"]))
        check(d <= 1e-5, "%s: the prompt's logits equal the native MHE_NO_SIMD build's within 1e-5 (max diff %g)" % (kind, d))
        print("%s: loss %.3f -> %.3f over %d steps; logits max |page - native| = %g (%d of %d bit-identical); "
              "page %.1f steps/s, native %.1f" % (kind, loss[0], loss[-1], steps, d, same, T * V, p["sps"], n["steps_per_s"]))
        L, H, maps = p["layers"], p["heads"], p["maps"]
        check(p["mapKind"] == [MAP_PROBS] * L and p["canvases"] == L * H,
              "%s: %d x %d probability maps drawn (%s, %d canvases)" % (kind, L, H, p["mapKind"], p["canvases"]))
        worst, causal = 0.0, True
        for i in range(L * H):
            w, c = rows_ok(maps, T, i * T * T, True)
            worst, causal = max(worst, w), causal and c
        check(worst <= 1e-5, "%s: every row of every map sums to 1 (max |sum - 1| = %g)" % (kind, worst))
        check(causal, "%s: no query attends to a later key" % kind)
        dm = max(abs(f32(x) - f32(y)) for x, y in zip(maps, n["maps"]))
        check(len(maps) == len(n["maps"]) and dm <= 1e-6, "%s: maps equal the native build's (max diff %g)" % (kind, dm))
        print("%s: max |row sum - 1| = %g over %d maps" % (kind, worst, L * H))
    click(b, "generate")
    g = b.wait("mhe.panels.A.generated && mhe.panels.B.generated && [mhe.panels.A.generated, mhe.panels.B.generated]", 20)
    check(all(len(x) > 0 for x in g), "generated text in both panels: %r" % g)
    gen_shown = b.eval("document.querySelector('#panelA .gen').textContent")
    check(gen_shown.startswith(PROMPT) and len(gen_shown) > len(PROMPT), "the continuation follows the prompt: %r" % gen_shown)
    os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
    b.screenshot(shot)
    check(os.path.getsize(shot) > 10000, "a screenshot %s" % shot)


def every_kind(b):
    set_value(b, "kindB", "")
    set_value(b, "steps", 3)
    for kind in KINDS17:
        set_value(b, "kindA", kind)
        b.eval("mhe.panels.A.maps = null, 1")
        click(b, "train")
        b.wait("mhe.panels.A.step == 3 && !mhe.panels.A.training || mhe.state.messageKind == 'err'", 60)
        msg = message(b)
        if not check(msg[1] != "err", "%s: trains 3 steps (%r)" % (kind, msg[0])):
            continue
        m = b.wait("mhe.panels.A.maps && {T: mhe.panels.A.maps.T, kinds: mhe.panels.A.maps.mapKind, "
                   "maps: Array.from(mhe.panels.A.maps.maps), layers: mhe.panels.A.maps.layers, heads: mhe.panels.A.maps.heads}", 20)
        shown = b.eval("document.querySelector('#panelA .maps').textContent + '|' + "
                       "document.querySelector('#panelA .note').textContent + '|' + "
                       "document.querySelectorAll('#panelA .maps canvas').length")
        T, L, H = m["T"], m["layers"], m["heads"]
        if kind == "fnet":
            check(m["kinds"] == [MAP_NONE] * L and shown.startswith("No map"), "fnet: says it has no map: %r" % shown[:60])
        elif kind == "linear":
            check(m["kinds"] == [MAP_WEIGHTS] * L and "W_seq" in shown and shown.endswith("|%d" % (L * H)),
                  "linear: shows W_seq, what it mixes instead: %r" % shown[-80:])
        elif kind == "mlp":
            ident = all(m["maps"][i * T * T + t * T + j] == (1.0 if t == j else 0.0)
                        for i in range(L * H) for t in range(T) for j in range(T))
            check(m["kinds"] == [MAP_IDENTITY] * L and ident and "identity" in shown, "mlp: the identity, said so")
        else:
            worst = max(rows_ok(m["maps"], T, i * T * T, True)[0] for i in range(L * H))
            check(m["kinds"] == [MAP_PROBS] * L and worst <= 1e-5 and shown.endswith("|%d" % (L * H)),
                  "%s: %d maps whose rows sum to 1 (max |sum - 1| %g)" % (kind, L * H, worst))
        eq = b.eval("document.querySelector('#panelA .eq').textContent + '|' + document.querySelector('#panelA .status').textContent")
        check(len(eq.split("|")[0]) > 20 and "attention parameters per layer: " in eq, "%s: equation and parameter count shown" % kind)
        # text from it: a decoder continues the prompt, an encoder fills in its gaps
        encoder = kind in ("fnet", "linear")
        prompt = PROMPT.replace("created", "cr__ted") if encoder else PROMPT
        set_value(b, "prompt", prompt)
        b.eval("mhe.panels.A.generated = '', 1")
        click(b, "generate")
        g = b.wait("mhe.panels.A.generated", 20)
        if encoder:
            check(len(g) == len(prompt) and "_" not in g and g[:20] == prompt[:20], "%s: fills in the gaps: %r" % (kind, g))
        else:
            check(len(g.encode("utf-8", "surrogateescape")) >= 1, "%s: generates text: %r" % (kind, g))
        set_value(b, "prompt", PROMPT)


def bad_input(b, tmp):
    set_value(b, "steps", 100000)
    set_value(b, "kindA", "mha")
    b.eval("document.querySelector('input[value=pasted]').checked = true, 1")
    cases = [("", "empty"), ("hello", "needs 65"), ("a" * ((1 << 20) + 1), "at most 1048576")]
    for text, want in cases:
        set_value(b, "pasted", text)
        click(b, "train")
        b.wait("mhe.state.messageKind == 'err'", 20)
        msg = message(b)[0]
        check(want in msg and not b.eval("mhe.panels.A.training"), "pasted %d bytes: %r says %r" % (len(text), msg, want))
    binary = os.path.join(tmp, "binary.bin")
    with open(binary, "wb") as f:
        f.write(bytes(range(256)) * 40)
    b.set_files("#file", [binary])
    b.wait("mhe.state.fileBytes && mhe.state.fileBytes.length == 10240", 10)
    click(b, "train")
    b.wait("mhe.state.messageKind == 'err'", 20)
    msg = message(b)[0]
    check("binary" in msg and "NUL byte at offset 0" in msg, "a binary file: %r" % msg)
    big = os.path.join(tmp, "big.txt")
    with open(big, "wb") as f:
        f.write(b"x" * (3 << 20))
    b.set_files("#file", [big])
    b.wait("mhe.state.messageKind == 'err'", 10)
    msg = message(b)[0]
    check("3,145,728 bytes" in msg and "at most" in msg, "a 3 MiB file refused before it is read: %r" % msg)
    b.eval("document.querySelector('input[value=bundled]').checked = true, 1")
    # Stop, and the kind changed during training
    click(b, "train")
    b.wait("mhe.panels.A.step >= 5", 30)
    click(b, "stop")
    idle(b, 10)
    msg = message(b)[0]
    check(re.match(r"Stopped at step \d+\.", msg), "Stop: %r" % msg)
    click(b, "train")
    b.wait("mhe.panels.A.step >= 3", 30)
    click(b, "train")   # Train again while training: the run is replaced, nothing is left waiting
    b.wait("mhe.panels.A.step >= 3 && mhe.panels.A.losses.length == mhe.panels.A.step", 30)
    time.sleep(3.5)     # past the page's grace for a worker that does not stop
    check(b.eval("mhe.panels.A.training") and message(b)[1] != "err",
          "Train during training restarts the run, and the worker stays: %r" % message(b)[0])
    set_value(b, "kindA", "mhe-mul")
    idle(b, 10)
    msg = message(b)[0]
    check("the kind changed to mhe-mul" in msg, "a kind changed during training stops it: %r" % msg)
    check(b.eval("document.querySelector('#panelA h2').textContent") == "mhe-mul", "the panel shows the new kind")


# a WASI program run to its end in the page: what it wrote to stdout and
# stderr, and its exit status (the calls test_gemm makes, nothing else)
RUN_WASI = r"""
(async (b64) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  let mem, out = "";
  class Exit { constructor(code) { this.code = code; } }
  const wasi = {
    fd_write(fd, iov, n, nw) {
      const v = new DataView(mem.buffer); let total = 0;
      for (let i = 0; i < n; i++) {
        const p = v.getUint32(iov + 8 * i, true), l = v.getUint32(iov + 8 * i + 4, true);
        out += new TextDecoder().decode(new Uint8Array(mem.buffer, p, l)); total += l;
      }
      v.setUint32(nw, total, true); return 0;
    },
    fd_fdstat_get(fd, st) { const v = new DataView(mem.buffer); for (let i = 0; i < 24; i++) v.setUint8(st + i, 0);
                            v.setUint8(st, 2); return 0; },
    fd_close: () => 0, fd_seek: () => 70,
    proc_exit(code) { throw new Exit(code); },
  };
  const { instance } = await WebAssembly.instantiate(bytes, { wasi_snapshot_preview1: wasi });
  mem = instance.exports.memory;
  let code = 0;
  try { instance.exports._start(); } catch (e) { if (e instanceof Exit) code = e.code; else throw e; }
  return [out, code];
})(%s)
"""


def gemm_in_browser(b, build):
    bdir = mhetest.build_dir()
    p = subprocess.run(["make", "-s", "B=" + bdir, bdir + "/web-obj/test_gemm.wasm"], cwd=mhetest.REPO,
                       capture_output=True, text=True)
    if not check(p.returncode == 0, "test_gemm.wasm builds: " + (p.stdout + p.stderr)[-1000:]):
        return
    with open(os.path.join(build, "web-obj", "test_gemm.wasm"), "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    out, code = b.eval(RUN_WASI % js(b64), timeout=300)
    m = re.search(r"RESULT: (\d+) passed, (\d+) failed", out)
    check(code == 0 and m and int(m.group(1)) > 1000 and m.group(2) == "0",
          "test_gemm in the browser (SIMD128 kernel): %s" % (m.group(0) if m else out[-500:]))
    print("test_gemm in the browser: " + (m.group(0) if m else "no RESULT line"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--screenshot", default=None)
    args = ap.parse_args()
    exe = cdp.find_chromium()
    if not exe:
        return mhetest.skip(NAME, "no chromium (Debian: apt-get install chromium)")
    build = mhetest.repo_path(mhetest.build_dir())
    bdir = mhetest.build_dir()
    p = subprocess.run(["make", "-s", "B=" + bdir, "web", bdir + "/web-native/web_native"], cwd=mhetest.REPO,
                       capture_output=True, text=True)
    if p.returncode != 0 and "cannot build for wasm32-wasi" in p.stdout + p.stderr:
        return mhetest.skip(NAME, [l for l in (p.stdout + p.stderr).split("\n") if "cannot build" in l][0])
    if not check(p.returncode == 0, "make web: " + (p.stdout + p.stderr)[-2000:]):
        return mhetest.finish()
    tmp = mhetest.tmpdir("mhe-web-test-")
    page = os.path.join(build, "web", "index.html")
    with open(os.path.join(build, "web", "text.js")) as f:   # the bundled text, as the page has it
        b64 = re.search(r'MHE_TEXT_B64 = "([^"]*)"', f.read()).group(1)
    text_path = os.path.join(tmp, "bundled.txt")
    with open(text_path, "wb") as f:
        f.write(base64.b64decode(b64))
    shot = args.screenshot or os.path.join(build, "web-test", "page.png")
    t0 = time.time()
    with cdp.Browser(exe) as b:
        b.navigate("file://" + page)
        b.wait("window.mhe && mhe.state.ready && mhe.panels.B.ready && mhe.state.counts", 60)
        names = b.eval("mhe.state.kinds.map(k => k.name)")
        check(names == KINDS17, "the page offers the 17 kinds: %s" % names)
        for part in (lambda: side_by_side(b, build, text_path, args.steps, shot), lambda: every_kind(b),
                     lambda: bad_input(b, tmp), lambda: gemm_in_browser(b, build)):
            try:
                part()
            except cdp.CdpError as e:   # one part stuck: counted, and the next part still runs
                check(False, "the page: %s" % e)
        errors = b.console_errors()
        check(not errors, "no JavaScript errors: %s" % errors[:3])
    print("browser part: %.1f s" % (time.time() - t0))
    return mhetest.finish()


if __name__ == "__main__":
    sys.exit(main())
