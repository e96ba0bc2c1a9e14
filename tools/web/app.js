// The page (docs/web.md): controls, charts and maps on the main thread; the
// library runs in one Web Worker per model (worker.js), so training never
// blocks the page. Every number shown comes from the library through
// mhe_web.c; this file only lays out, draws and routes messages.
"use strict";

const $ = (id) => document.getElementById(id);
const MAP_NONE = 0, MAP_PROBS = 1, MAP_IDENTITY = 2, MAP_WEIGHTS = 3;   // mhe_web.c's WEB_MAP_*
const STOP_GRACE_MS = 3000;   // a worker that has not stopped by then is replaced

// What each kind computes, for reading (docs/kinds.md has the full text);
// the source line under it is the library's own kind table.
const EQUATION = {
  "mha": "head i: A_i = softmax(X W_i^Q (X W_i^K)^T / sqrt(d_h)),  O_i = A_i X W_i^V;  out = [O_1 .. O_n] W^O",
  "sha": "one head A = softmax(Q K^T / sqrt(d_h)), its output copied n times into W^O",
  "mqa": "Q_i = X W_i^Q per head; one K = X W^K and one V = X W^V shared by all heads",
  "gqa": "Q_i per head; K, V per group of heads (kv_groups groups)",
  "skv": "one projection per head serves as key and value: K_i = V_i = X W_i^KV",
  "el-att": "only Q_i = X W_i^Q is projected; K = V = X, the input itself",
  "mhe-add": "one seed Q, K, V = X W^{Q,K,V}; head i adds its embeddings: A_i = softmax((Q + e_i^Q)(K + e_i^K)^T / sqrt(d_h)),  O_i = A_i (V + e_i^V)",
  "mhe-mul": "one seed Q, K, V = X W^{Q,K,V}; head i scales by its embeddings: A_i = softmax((Q * (1+e_i^Q))(K * (1+e_i^K))^T / sqrt(d_h)),  O_i = A_i (V * (1+e_i^V))",
  "mlp": "out = W_down (SiLU(W_gate x) * W_up x): a gated MLP in attention's place, no token mixing",
  "taylor": "w_tj = 1 + s + s^2/2 with s = q_t . k_j / sqrt(d_h);  A_tj = w_tj / sum_j' w_tj'",
  "nonapprox": "s_j = SiLU(q_j) . k_j / sqrt(d_h), one score per position;  A_tj = exp(s_j) / sum_{j' <= t} exp(s_j')",
  "rndemb-qk": "Q, K from fixed random inputs run through the blocks below; V = X W^V from the input",
  "fixedseq-qk": "Q, K from a fixed token sequence run through the blocks below; V = X W^V from the input",
  "staticemb-qk": "Q, K from the static token + position embeddings; V = X W^V from the layer's input",
  "fnet": "Y = Re(F_L X F_C): a 2-D discrete Fourier transform over positions and features, no weights",
  "linear": "Y = W_seq X W_hidden^T: learned mixing over positions and over features",
  "collab": "shared W~_Q, W~_K; head i: A_i = softmax(((X W~_Q) * m_i)(X W~_K)^T / sqrt(d_h) + content bias),  O_i = A_i X W_i^V",
};
// what the maps of a kind show
const MAP_NOTE = {
  "mlp": "No token mixing: each position sees only itself, so every map is the identity.",
  "fnet": "No map: FNet mixes every token with every other through a fixed Fourier transform over positions and features at once. It has no weights to learn and no heads, so there is no token-to-token table to draw.",
  "linear": "Not probabilities: the map is the learned position-mixing matrix W_seq (its first T rows and columns), the same for every head and every sentence; blue negative, red positive.",
  "taylor": "Normalised Taylor weights 1 + s + s^2/2 over the keys each query sees: rows sum to 1, but this is not a softmax.",
  "nonapprox": "One score per key, shared by every query: a row differs from the next only by how far it sees.",
  "rndemb-qk": "Q and K come from fixed random inputs: these maps are the same whatever the sentence.",
  "fixedseq-qk": "Q and K come from a fixed text: these maps are the same whatever the sentence.",
  "staticemb-qk": "Q and K come from the token and position embeddings, not from the layer's input.",
  "sha": "One head: every head shows the same map.",
  "mhe-add": "One seed projection for all heads: the heads differ only through their embeddings e_i.",
  "mhe-mul": "One seed projection for all heads: the heads differ only through their embeddings e_i.",
};
const SOFTMAX_NOTE = "Softmax probabilities: each row (a query) sums to 1 over the keys it sees.";

const state = {
  ready: false, kinds: [], maxText: 1 << 20, counts: null,
  message: "", messageKind: "", maxGapMs: 0, lastTick: 0,
  fileBytes: null, fileName: "",
};
window.mhe = { state };

function b64bytes(s) {
  const bin = atob(s), out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
const wasmBytes = b64bytes(MHE_WASM_B64);
const bundledText = b64bytes(MHE_TEXT_B64);
const workerUrl = URL.createObjectURL(new Blob(["\"use strict\";(" + mheWorkerMain.toString() + ")(self);"],
                                               { type: "text/javascript" }));

function say(text, kind) {
  state.message = text; state.messageKind = kind || "info";
  $("msg").textContent = text;
  $("msg").className = text ? state.messageKind : "";
}

// the main thread's responsiveness: the longest gap between timer ticks
setInterval(() => {
  const now = performance.now();
  if (state.lastTick) state.maxGapMs = Math.max(state.maxGapMs, now - state.lastTick);
  state.lastTick = now;
}, 50);

function sizeConfig() {
  const heads = +$("n_heads").value, seq = +$("seq_len").value, steps = Math.max(1, +$("steps").value | 0);
  const lr = +$("lr").value;
  return ["d_model=" + $("d_model").value, "n_heads=" + heads, "n_layers=" + $("n_layers").value,
          "kv_groups=" + (heads >= 2 ? 2 : 1), "max_seq_len=" + seq, "seq_len=" + seq, "batch=" + $("batch").value,
          "steps=" + steps, "lr=" + (lr > 0 ? lr : 3e-3), "min_lr=" + (lr > 0 ? lr / 10 : 3e-4),
          "warmup=" + Math.min(30, Math.ceil(steps / 4))].join("\n");
}
const kindConfig = (kind) => "attn=" + kind + "\n" + sizeConfig();

class Panel {
  constructor(key) {
    this.key = key;
    this.el = $("panel" + key);
    this.el.innerHTML =
      '<h2></h2><div class="eq"></div><div class="src"></div><div class="status"></div>' +
      '<div class="note"></div><div class="next status"></div><div class="maps"></div>' +
      '<h2>Generated</h2><div class="gen"></div>';
    this.q = (sel) => this.el.querySelector(sel);
    this.kind = "";
    this.losses = [];
    this.training = false;
    this.stepsPerSec = 0;
    this.step = 0;
    this.params = 0;
    this.maps = null;
    this.generated = "";
    this.onReady = null;
    this.spawn();
  }
  spawn() {
    if (this.worker) this.worker.terminate();
    this.ready = false;
    this.worker = new Worker(workerUrl);
    this.worker.onmessage = (e) => this.receive(e.data);
    this.worker.onerror = (e) => { this.training = false; say("Worker " + this.key + " failed: " + e.message, "err"); updateButtons(); };
    this.worker.postMessage({ type: "load", wasm: wasmBytes.slice().buffer });
  }
  post(m) { this.worker.postMessage(m); }
  setKind(kind) {
    this.kind = kind;
    const k = state.kinds.find((x) => x.name === kind);
    this.q("h2").textContent = (this.key === "A" ? "" : "side by side: ") + kind;
    this.q(".eq").textContent = EQUATION[kind] || "";
    this.q(".src").textContent = k ? "kind table: " + k.source + ";  tensors: " + k.tensors : "";
    this.q(".note").textContent = MAP_NOTE[kind] || SOFTMAX_NOTE;
    this.showCounts();
  }
  showCounts() {
    const row = state.counts && state.counts.find((r) => state.kinds[r.id].name === this.kind);
    this.countLine = !row ? "" : row.attn < 0 ? "this size does not fit " + this.kind + ": " + row.why
      : "attention parameters per layer: " + row.attn.toLocaleString("en") + ";  model: " + row.total.toLocaleString("en");
    this.showStatus();
  }
  showStatus() {
    const last = this.losses.length ? this.losses[this.losses.length - 1].toFixed(3) : "-";
    const run = this.training ? "training" : this.step ? "trained" : "not trained";
    const left = this.training && this.stepsPerSec > 0 ? ", about " + Math.ceil((this.steps - this.step) / this.stepsPerSec) + " s left" : "";
    this.q(".status").textContent = this.countLine + "\n" +
      run + ": step " + this.step + ", loss " + last + ", " + this.stepsPerSec.toFixed(1) + " steps/s" + left;
    this.q(".status").style.whiteSpace = "pre-wrap";
  }
  train(text, config, seed, steps) {   // a run in progress is replaced
    clearTimeout(this.stopTimer);
    this.stopReason = "";
    this.config = config; this.seed = seed; this.steps = steps;
    this.losses = []; this.step = 0; this.stepsPerSec = 0; this.maps = null; this.generated = "";
    this.q(".maps").innerHTML = ""; this.q(".next").textContent = ""; this.q(".gen").textContent = "";
    this.training = true;
    this.runSeq = (this.runSeq || 0) + 1;
    this.post({ type: "train", text, config, seed, steps, run: this.runSeq });
    this.showStatus();
  }
  stop(reason) {
    if (!this.training) return;
    this.post({ type: "stop" });
    this.stopReason = reason;
    clearTimeout(this.stopTimer);
    this.stopTimer = setTimeout(() => {   // a step that never ends must not keep the page waiting
      if (!this.training) return;
      this.training = false;
      this.spawn();
      say("Worker " + this.key + " did not stop within " + STOP_GRACE_MS / 1000 + " s; it was replaced.", "err");
      updateButtons();
    }, STOP_GRACE_MS);
  }
  receive(m) {
    if (m.run !== (this.runSeq || 0) && ["setup", "progress", "maps", "done", "error"].includes(m.type)) return;   // a replaced run
    if (m.type === "ready") {
      this.ready = true;
      if (this.onReady) this.onReady(m);
    } else if (m.type === "setup") {
      this.params = m.params;
      this.arch = m.arch;
    } else if (m.type === "progress") {
      this.losses.push(...m.losses);
      this.step = m.step;
      this.stepsPerSec = m.stepsPerSec;
      this.showStatus();
      drawLoss();
    } else if (m.type === "maps") {
      if (m.error) { this.q(".maps").textContent = m.error; return; }
      this.maps = m;
      drawMaps(this);
    } else if (m.type === "done") {
      clearTimeout(this.stopTimer);
      this.training = false;
      this.showStatus();
      if (m.reason === "stopped" && this.stopReason) say(this.stopReason.replace("STEP", m.step), "info");
      this.stopReason = "";
      updateButtons();
    } else if (m.type === "error") {
      this.training = false;
      say((m.bad_text ? "Text: " : this.kind + ": ") + m.msg, "err");
      this.showStatus();
      updateButtons();
    } else if (m.type === "counts") {
      state.counts = m.rows;
      panels.forEach((p) => p.showCounts());
      drawCounts();
    } else if (m.type === "generated") {
      if (m.error) { this.q(".gen").textContent = m.error; return; }
      this.generated = new TextDecoder().decode(m.bytes);
      this.q(".gen").textContent = m.encoder ? "filled in: " + this.generated : $("prompt").value + this.generated;
    }
  }
}

const panelA = new Panel("A"), panelB = new Panel("B");
const panels = [panelA, panelB];
window.mhe.panels = { A: panelA, B: panelB };
const active = () => (panelB.kind ? [panelA, panelB] : [panelA]);

function updateButtons() {
  $("stop").disabled = !panels.some((p) => p.training);
}

panelA.onReady = (m) => {
  if (state.kinds.length) return;   // a replaced worker: the page is set up already
  state.kinds = m.kinds;
  state.maxText = m.maxText;
  for (const k of m.kinds) {
    $("kindA").add(new Option(k.name, k.name));
    $("kindB").add(new Option(k.name, k.name));
  }
  $("kindA").value = "mha";
  panelA.setKind("mha");
  state.ready = true;
  refreshCounts();
};

function refreshCounts() { panelA.post({ type: "counts", config: sizeConfig() }); }

// ---- the text ---------------------------------------------------------
$("bundledName").textContent = MHE_TEXT_NAME + " (" + (bundledText.length / 1024).toFixed(0) + " KiB)";
function chosenText() {
  const src = document.querySelector('input[name="src"]:checked').value;
  if (src === "bundled") return bundledText;
  if (state.fileBytes) return state.fileBytes;
  return new TextEncoder().encode($("pasted").value);
}
$("pasted").addEventListener("input", () => {
  state.fileBytes = null;
  document.querySelector('input[value="pasted"]').checked = true;
});
$("file").addEventListener("change", () => {
  const f = $("file").files[0];
  if (!f) return;
  document.querySelector('input[value="pasted"]').checked = true;
  if (f.size > state.maxText) {   // not read at all: the library would refuse it anyway
    state.fileBytes = null;
    say("Text: " + f.name + " is " + f.size.toLocaleString("en") + " bytes; the page takes at most " +
        state.maxText.toLocaleString("en") + " (1 MiB): choose a shorter file", "err");
    state.fileTooLong = true;
    return;
  }
  state.fileTooLong = false;
  f.arrayBuffer().then((b) => {
    state.fileBytes = new Uint8Array(b);
    state.fileName = f.name;
    $("pasted").value = "";
    $("pasted").placeholder = "using " + f.name + " (" + b.byteLength.toLocaleString("en") + " bytes)";
    say("Loaded " + f.name + ": press Train.", "info");
  });
});

// ---- training ----------------------------------------------------------
$("train").addEventListener("click", () => {
  if (!state.ready) { say("Still loading the library.", "info"); return; }
  if (state.fileTooLong && !state.fileBytes && document.querySelector('input[value="pasted"]').checked && !$("pasted").value) {
    say("Text: the chosen file is too long (over 1 MiB): choose a shorter one, or paste text", "err");
    return;
  }
  say("", "");
  state.maxGapMs = 0;
  const text = chosenText(), seed = Math.max(0, +$("seed").value | 0), steps = Math.max(1, +$("steps").value | 0);
  for (const p of active()) {
    p.setKind(p === panelA ? $("kindA").value : $("kindB").value);
    p.train(text.slice(), kindConfig(p.kind), seed, steps);
  }
  updateButtons();
  sendPrompt();
});
$("stop").addEventListener("click", () => {
  panels.forEach((p) => p.stop("Stopped at step STEP."));
});

function kindChanged(p, sel) {
  const kind = sel.value;
  if (p.training) p.stop("Stopped " + p.kind + " at step STEP: the kind changed to " + kind + ". Press Train to train it.");
  if (p === panelB) {
    panelB.el.classList.toggle("hidden", !kind);
    if (!kind) { panelB.kind = ""; drawLoss(); drawCounts(); return; }
  }
  p.setKind(kind);
  drawCounts();
}
$("kindA").addEventListener("change", () => kindChanged(panelA, $("kindA")));
$("kindB").addEventListener("change", () => kindChanged(panelB, $("kindB")));
for (const id of ["d_model", "n_heads", "n_layers", "seq_len", "batch"]) {
  $(id).addEventListener("change", () => {
    panels.forEach((p) => p.training && p.stop("Stopped " + p.kind + " at step STEP: the model size changed. Press Train to train the new size."));
    refreshCounts();
  });
}

// ---- the sentence: maps and generation ----------------------------------
function sendPrompt() {
  if (!$("prompt").value) { say("Type a sentence first.", "info"); return; }
  for (const p of active()) p.post({ type: "prompt", prompt: $("prompt").value });
}
$("show").addEventListener("click", sendPrompt);
$("prompt").addEventListener("keydown", (e) => { if (e.key === "Enter") sendPrompt(); });
$("generate").addEventListener("click", () => {
  if (!$("prompt").value) { say("Type a sentence first.", "info"); return; }
  for (const p of active()) {
    if (p.arch === 1 && !$("prompt").value.includes("_")) {   // a masked-LM encoder only fills gaps
      p.generated = "";
      p.q(".gen").textContent = p.kind + " trains as an encoder: it does not continue text. Put _ where bytes are missing and it fills them in.";
      continue;
    }
    p.post({ type: "generate", prompt: $("prompt").value, n: Math.max(1, +$("genN").value | 0),
             temperature: +$("temp").value, topK: 40, seed: Math.max(0, +$("seed").value | 0) });
  }
});

// ---- drawing -----------------------------------------------------------
const COLORS = { A: "#0969da", B: "#cf222e" };

function drawLoss() {
  const c = $("loss"), g = c.getContext("2d"), W = c.width, H = c.height, m = 34;
  g.clearRect(0, 0, W, H);
  const runs = active().filter((p) => p.losses.length);
  g.strokeStyle = "#d0d7de"; g.strokeRect(m, 6, W - m - 6, H - m);
  if (!runs.length) return;
  const steps = Math.max(...runs.map((p) => p.losses.length), 2);
  const all = runs.flatMap((p) => p.losses);
  const hi = Math.max(...all), lo = Math.min(...all, hi - 0.1);
  const x = (i) => m + (W - m - 6) * i / (steps - 1), y = (v) => 6 + (H - m) * (hi - v) / (hi - lo);
  g.fillStyle = "#57606a"; g.font = "11px sans-serif";
  g.fillText(hi.toFixed(2), 2, 14); g.fillText(lo.toFixed(2), 2, H - m + 4);
  g.fillText("step " + steps, W - 60, H - m + 18);
  runs.forEach((p) => {
    g.strokeStyle = COLORS[p.key]; g.lineWidth = 1.5; g.beginPath();
    p.losses.forEach((v, i) => (i ? g.lineTo(x(i), y(v)) : g.moveTo(x(i), y(v))));
    g.stroke();
  });
  runs.forEach((p, i) => { g.fillStyle = COLORS[p.key]; g.fillText(p.kind + " " + p.losses[p.losses.length - 1].toFixed(3), m + 8 + 150 * i, H - m + 18); });
}

function drawCounts() {
  const c = $("counts"), g = c.getContext("2d"), W = c.width, H = c.height;
  g.clearRect(0, 0, W, H);
  if (!state.counts) return;
  const rows = state.counts, max = Math.max(...rows.map((r) => r.attn), 1), bh = H / rows.length, left = 92;
  g.font = "11px sans-serif";
  rows.forEach((r, i) => {
    const name = state.kinds[r.id].name, yy = i * bh;
    const color = name === panelA.kind ? COLORS.A : name === panelB.kind ? COLORS.B : "#8c959f";
    g.fillStyle = "#1b1f24"; g.fillText(name, 2, yy + bh - 2);
    if (r.attn < 0) { g.fillStyle = "#57606a"; g.fillText("does not fit this size", left, yy + bh - 2); return; }
    const w = (W - left - 70) * r.attn / max;
    g.fillStyle = color; g.fillRect(left, yy + 1, Math.max(w, 1), bh - 2);
    g.fillStyle = "#1b1f24"; g.fillText(r.attn.toLocaleString("en"), left + w + 4, yy + bh - 2);
  });
}

function charLabel(b) {
  if (b === 10) return "\\n";
  if (b === 32) return "\u2423";
  return b < 32 || b > 126 ? "0x" + b.toString(16) : String.fromCharCode(b);
}

function drawMaps(p) {
  const m = p.maps, box = p.q(".maps"), T = m.T;
  const kindsShown = new Set(m.mapKind);
  // the byte after the prompt, top 5
  const order = Array.from(m.next.keys()).sort((a, b) => m.next[b] - m.next[a]).slice(0, 5);
  p.q(".next").textContent = "after \u201c" + new TextDecoder().decode(new Uint8Array(m.prompt)) + "\u201d (step " + m.step + ") the next byte: " +
    order.map((b) => "'" + charLabel(b) + "' " + m.next[b].toFixed(3)).join(", ");
  box.innerHTML = "";
  if (kindsShown.size === 1 && kindsShown.has(MAP_NONE)) {
    box.textContent = MAP_NOTE[p.kind] || "This kind has no attention map.";
    return;
  }
  box.style.gridTemplateColumns = "repeat(" + m.heads + ", 1fr)";
  for (let l = 0; l < m.layers; l++) {
    for (let h = 0; h < m.heads; h++) {
      const cell = document.createElement("div");
      const lab = document.createElement("div");
      lab.className = "lab";
      lab.textContent = "layer " + l + " head " + h;
      cell.appendChild(lab);
      if (m.mapKind[l] === MAP_NONE) { cell.appendChild(document.createTextNode("no map")); box.appendChild(cell); continue; }
      const cv = document.createElement("canvas");
      cv.width = T; cv.height = T;
      const g = cv.getContext("2d"), img = g.createImageData(T, T);
      const off = (l * m.heads + h) * T * T;
      let scale = 1;
      if (m.mapKind[l] === MAP_WEIGHTS) {
        scale = 1e-12;
        for (let i = 0; i < T * T; i++) scale = Math.max(scale, Math.abs(m.maps[off + i]));
      }
      for (let i = 0; i < T * T; i++) {
        const v = m.maps[off + i];
        let r, gg, b;
        if (m.mapKind[l] === MAP_WEIGHTS) {   // diverging: blue below 0, red above
          const a = Math.min(1, Math.abs(v) / scale);
          r = v > 0 ? 255 : 255 * (1 - a); b = v < 0 ? 255 : 255 * (1 - a); gg = 255 * (1 - a);
        } else {                               // probabilities: square-root scale, so small weights show
          const a = Math.sqrt(Math.max(0, Math.min(1, v)));
          r = 255 * (1 - a); gg = 255 * (1 - 0.75 * a); b = 255 - 90 * a;
        }
        img.data[4 * i] = r; img.data[4 * i + 1] = gg; img.data[4 * i + 2] = b; img.data[4 * i + 3] = 255;
      }
      g.putImageData(img, 0, 0);
      cv.addEventListener("mousemove", (e) => {
        const rc = cv.getBoundingClientRect();
        const j = Math.floor((e.clientX - rc.left) / rc.width * T), t = Math.floor((e.clientY - rc.top) / rc.height * T);
        if (t < 0 || j < 0 || t >= T || j >= T) return;
        $("hover").textContent = p.kind + " layer " + l + " head " + h + ": query " + t + " '" + charLabel(m.prompt[t]) +
          "' \u2192 key " + j + " '" + charLabel(m.prompt[j]) + "': " + m.maps[off + t * T + j].toFixed(4);
      });
      cell.appendChild(cv);
      box.appendChild(cell);
    }
  }
}
