// The page's Web Worker: one instance of the library (mhe.wasm) per worker,
// driven by messages from app.js. The page loads this file as a plain
// script and starts the worker from mheWorkerMain's source, so the page
// also works opened from disk (file://), where Chromium refuses worker
// scripts by URL.
"use strict";

function mheWorkerMain(self) {
  let ex = null, mem = null;       // the instance's exports and memory
  let run = null;                  // the training run in progress
  let runs = 0;                    // runs started: a chunk of an older run finds its number outdated
  let tag = 0;                     // the page's number of the model here, on every message, so the
                                   // page can drop what an earlier run said after it was replaced
  const post = (m, transfer) => self.postMessage(Object.assign(m, { run: tag }), transfer || []);
  let prompt = null;               // bytes of the prompt the maps show
  let lastMaps = 0;
  const MAPS_EVERY_MS = 400;       // refresh of the maps while training
  const CHUNK_MS = 50;             // training between two looks at the message queue
  const tick = new MessageChannel();   // yields to the message queue without setTimeout's clamping

  const u8 = () => new Uint8Array(mem.buffer);   // a fresh view: memory may have grown
  function cstr(p) {
    const b = u8();
    let q = p;
    while (b[q]) q++;
    return new TextDecoder().decode(b.subarray(p, q));
  }
  function put(bytes) {            // bytes into web_buffer; their length
    const p = ex.web_buffer(bytes.length);
    if (!p) throw new Error("out of memory");
    const b = u8();
    b.set(bytes, p);
    b[p + bytes.length] = 0;
    return bytes.length;
  }
  const enc = (s) => new TextEncoder().encode(s);
  const err = () => cstr(ex.web_err());

  // WASI calls the library can reach: stderr (an assertion's message) to
  // the console; nothing else is there to call
  const wasi = {
    fd_write(fd, iov, n, nwritten) {
      const v = new DataView(mem.buffer);
      let total = 0, text = "";
      for (let i = 0; i < n; i++) {
        const p = v.getUint32(iov + 8 * i, true), len = v.getUint32(iov + 8 * i + 4, true);
        text += new TextDecoder().decode(new Uint8Array(mem.buffer, p, len));
        total += len;
      }
      console.error(text);
      v.setUint32(nwritten, total, true);
      return 0;
    },
    fd_close: () => 0,
    fd_seek: () => 70,   // ESPIPE
    proc_exit(code) { throw new Error("the library exited with " + code); },
  };

  function kinds() {
    const out = [];
    for (let k = 0; k < ex.web_kind_count(); k++)
      out.push({ id: k, name: cstr(ex.web_kind_name(k)), source: cstr(ex.web_kind_source(k)),
                 tensors: cstr(ex.web_kind_tensors(k)) });
    return out;
  }

  function counts(config) {
    const rows = [];
    for (let k = 0; k < ex.web_kind_count(); k++) {
      const attn = ex.web_count(put(enc(config)), k, 0);
      const why = attn < 0 ? err() : "";
      const total = attn < 0 ? -1 : ex.web_count(put(enc(config)), k, 1);
      rows.push({ id: k, attn, total, why: total < 0 && !why ? err() : why });
    }
    return rows;
  }

  function analyze() {
    const T = ex.web_analyze(put(prompt));
    if (T < 0) return { type: "maps", error: err() };
    const V = 256;
    const base = ex.web_out() >> 2;
    const f = new Float32Array(mem.buffer);
    const logits = f.slice(base, base + T * V);
    const next = f.slice(base + T * V, base + T * V + V);
    const nmaps = ex.web_n_maps();
    const maps = f.slice(base + T * V + V, base + T * V + V + nmaps * T * T);
    const mapKind = [];
    for (let l = 0; l < ex.web_n_layers(); l++) mapKind.push(ex.web_map_kind(l));
    return { type: "maps", T, V, logits, next, maps, mapKind, prompt: Array.from(prompt.subarray(0, T)),
             layers: ex.web_n_layers(), heads: nmaps / Math.max(1, ex.web_n_layers()), step: ex.web_step_count() };
  }

  function sendMaps(idle) {
    if (!prompt || (!run && !idle)) return;
    const m = analyze();
    lastMaps = performance.now();
    const transfer = m.error ? [] : [m.logits.buffer, m.next.buffer, m.maps.buffer];
    post(m, transfer);
  }

  function trainChunk(e) {
    if (!run || e.data !== run.id) return;
    if (run.stop) {
      post({ type: "done", reason: "stopped", step: ex.web_step_count() });
      run = null;
      return;
    }
    const t0 = performance.now(), losses = [];
    while (performance.now() - t0 < CHUNK_MS && ex.web_step_count() < run.steps) {
      const loss = ex.web_step();
      if (Number.isNaN(loss)) {
        post({ type: "error", msg: err() });
        run = null;
        return;
      }
      losses.push(loss);
    }
    run.busy += performance.now() - t0;
    run.done += losses.length;
    post({ type: "progress", step: ex.web_step_count(), losses,
                       stepsPerSec: run.done / (run.busy / 1000) });
    const finished = ex.web_step_count() >= run.steps;
    if (finished || performance.now() - lastMaps > MAPS_EVERY_MS) sendMaps();
    if (finished) {
      post({ type: "done", reason: "finished", step: ex.web_step_count() });
      run = null;
      return;
    }
    tick.port2.postMessage(run.id);
  }
  tick.port1.onmessage = trainChunk;

  self.onmessage = (e) => {
    const m = e.data;
    try {
      if (m.type === "load") {
        const inst = new WebAssembly.Instance(new WebAssembly.Module(m.wasm), { wasi_snapshot_preview1: wasi });
        ex = inst.exports;
        mem = ex.memory;
        ex._initialize();
        post({ type: "ready", kinds: kinds(), maxText: ex.web_max_text() });
      } else if (m.type === "counts") {
        post({ type: "counts", rows: counts(m.config), config: m.config });
      } else if (m.type === "train") {
        run = null;
        tag = m.run;
        if (ex.web_set_text(put(m.text)) !== 0) { post({ type: "error", msg: err(), bad_text: true }); return; }
        if (ex.web_setup(put(enc(m.config)), m.seed) !== 0) { post({ type: "error", msg: err() }); return; }
        run = { id: ++runs, steps: m.steps, stop: false, busy: 0, done: 0 };
        post({ type: "setup", params: ex.web_n_params(), arch: ex.web_arch(), layers: ex.web_n_layers() });
        lastMaps = 0;
        tick.port2.postMessage(run.id);
      } else if (m.type === "stop") {
        if (run) run.stop = true;
        else post({ type: "done", reason: "idle", step: ex ? ex.web_step_count() : 0 });
      } else if (m.type === "prompt") {
        prompt = enc(m.prompt);
        if (run) lastMaps = 0;             // the next chunk sends them
        else if (ex.web_arch() >= 0) sendMaps(true);
      } else if (m.type === "generate") {
        const n = ex.web_generate(put(enc(m.prompt)), m.n, m.temperature, m.topK, m.seed);
        if (n < 0) post({ type: "generated", error: err() });
        else post({ type: "generated", bytes: u8().slice(ex.web_buffer(0), ex.web_buffer(0) + n),
                                encoder: ex.web_arch() === 1 });
      }
    } catch (x) {
      run = null;
      post({ type: "error", msg: "the worker failed: " + (x && x.message ? x.message : x) });
    }
  };
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) mheWorkerMain(self);
