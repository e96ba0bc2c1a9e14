#!/usr/bin/env python3
"""The papers' downstream protocol (MHE paper sec. 4.6, Table 3): for every
attention kind of the MHE paper's table and several seeds, pretrain a masked-LM
encoder, fine-tune it on a classification task, score it on the task's test
split, and report accuracy and macro-F1 (mean ± std over the seeds), PRR
against MHA and PEoP against SHA (mhe_prr, mhe_peop: accuracy, a direct
indicator), parameter counts, a plot with error bars, and each of the paper's
claims as holds / does not hold / not separated on this data.

    python3 tools/scripts/downstream_study.py [--out build/downstream] [--scale small|gpu|tiny]
        [--kinds mha,sha,...] [--seeds 3] [--subwords N] [--task quotes|pairs] [--threads 2] [--mhe build/mhe]
        [--steps-scale X]

The task is tools/scripts/downstream_task.py's (fortune quotations by file, 8
classes, Debian's fortunes package), built into OUT/task when missing and
checked before anything trains: labels inside the classes, no validation or
test text in the pretraining corpus (by hash). Each run lives in
OUT/runs/KIND-sSEED: pretrain.safetensors, finetune.safetensors, result.json,
each written atomically (mhe writes checkpoints atomically; the JSON through a
rename), so a study stopped midway resumes where it stopped and reuses every
finished step (a pretraining or fine-tuning stopped by a signal left a
checkpoint that `mhe train --resume` takes to its last step); a run whose saved settings differ from the study's is named
and refused rather than mixed in (delete its folder to redo it).

--scale small (the default, `make reproduce-downstream`): byte-level encoders
of d_model 128, 4 layers, 4 heads, sequences of 128 bytes; 1500 pretraining
steps of 16 sequences, 600 fine-tuning steps of 16 texts; the whole study fits
two hours on two cores. --scale gpu: d_model 512, 8 layers, 8 heads, 256 bytes,
10000 + 3000 steps of 32 on `--device cuda` (build/cuda/mhe). --scale tiny: a
few steps of a one-layer model, for the tests.

--subwords N: the same study on byte-level BPE tokens: a vocabulary of N tokens
(256 bytes, merges, "<mask>" last: the encoders' mask) trained by `mhe tokenize
train` on the pretraining corpus (OUT/task/bpe-N.tok, once), given to every
pretraining with --tokenizer and kept in the checkpoints, so fine-tuning and
testing read the texts as the same subwords; its runs are OUT/runs/KIND-sSEED-bpeN
and its report OUT/downstream-bpeN.*. The same number of steps and sequence
length, so a subword model sees more text per step (bytes per token about 3.5).

--task pairs: the second task, pair classification (does text B continue text
A? OUT/task/pairs, made by downstream_task.py from the same splits): the same
pretrained encoders (a run's pretrain.safetensors serves both tasks), fine-tuned
into finetune-pairs.safetensors and result-pairs.json, reported as
OUT/downstream-pairs[-bpeN].*.

Writes OUT/downstream.md (the table, the baselines and the verdicts),
OUT/downstream.json and OUT/downstream.svg."""
import argparse
import hashlib
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ["mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul"]
SCALES = {
    "tiny": {"model": {"d_model": 32, "n_heads": 2, "n_layers": 1, "max_seq_len": 64, "kv_groups": 2},   # the tests'
             "pre": {"steps": 6, "batch": 4, "seq_len": 64, "lr": 1e-3, "warmup": 1},
             "ft": {"steps": 4, "batch": 4, "seq_len": 64, "lr": 1e-3, "warmup": 1, "min_lr": 0},
             "device": "cpu"},
    "small": {"model": {"d_model": 128, "n_heads": 4, "n_layers": 4, "max_seq_len": 128, "kv_groups": 2},
              "pre": {"steps": 1500, "batch": 16, "seq_len": 128, "lr": 1e-3, "warmup": 100},
              "ft": {"steps": 600, "batch": 16, "seq_len": 128, "lr": 3e-4, "warmup": 60, "min_lr": 0},
              "device": "cpu"},
    "gpu": {"model": {"d_model": 512, "n_heads": 8, "n_layers": 8, "max_seq_len": 256, "kv_groups": 2},
            "pre": {"steps": 10000, "batch": 32, "seq_len": 256, "lr": 5e-4, "warmup": 500},
            "ft": {"steps": 3000, "batch": 32, "seq_len": 256, "lr": 1e-4, "warmup": 300, "min_lr": 0},
            "device": "cuda"},
}
TASKS = {"quotes": "fortune quotations by file",
         "pairs": "does text B continue text A (fortune entries cut in two; B its own or another entry's of the class)"}
# The downstream PRRs of the MHE paper's Table 3 (MHE against MHA on GLUE and
# SuperGLUE): 92.9 % at the lowest.
PAPER_PRR_FLOOR = 0.929


def fail(msg):
    print("downstream_study: %s" % msg, file=sys.stderr)
    sys.exit(1)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def params_of(path):
    """(attention, total) parameter counts from a checkpoint's safetensors header"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    att = tot = 0
    for name, t in head.items():
        if name == "__metadata__" or t.get("dtype") != "F32" or name.startswith("optim."):   # AdamW's moments are not parameters
            continue
        k = math.prod(t["shape"])
        tot += k
        if ".attn." in name:
            att += k
    return att, tot


def mhe(bin_, args, log, ok_if=None):
    """runs mhe ARGS, its output appended to LOG; a failure stops the study unless its output holds ok_if"""
    t0 = time.time()
    with open(log, "a") as f:
        f.write("$ %s %s\n" % (bin_, " ".join(map(str, args))))
        f.flush()
        p = subprocess.run([bin_] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
    if p.returncode != 0 and not (ok_if and ok_if in p.stdout):
        fail("mhe %s failed (exit %d); see %s:\n%s" % (args[0], p.returncode, log, p.stdout[-600:]))
    return p.stdout, time.time() - t0


def flags(d):
    out = []
    for k, v in d.items():
        out += ["--" + k, v]
    return out


def pretrain_settings(settings):
    """what a run's pretrained encoder depends on (both tasks' runs share it): its part of the run's settings"""
    pre = {k: settings[k] for k in ("scale", "model", "pre", "kind", "seed", "tokenizer") if k in settings}
    pre["pretrain.txt"] = settings["task"]["pretrain.txt"]
    return pre


def one_run(a, S, task, kind, seed):
    """pretrain, fine-tune, test one kind and seed; reuses what a previous study left"""
    d = os.path.join(a.out, "runs", "%s-s%d%s" % (kind, seed, a.suffix))
    os.makedirs(d, exist_ok=True)
    settings = {"scale": a.scale, "model": S["model"], "pre": S["pre"], "ft": S["ft"], "kind": kind, "seed": seed,
                "task": task["sha256"]}
    if a.tok_sha:   # bytes: no tokenizer entry
        settings["tokenizer"] = a.tok_sha
    pre_settings = pretrain_settings(settings)
    ft_name = "finetune.safetensors" if a.task == "quotes" else "finetune-%s.safetensors" % a.task
    res_name = "result.json" if a.task == "quotes" else "result-%s.json" % a.task
    res_path, pre, ft, log = (os.path.join(d, n) for n in (res_name, "pretrain.safetensors", ft_name, "log.txt"))
    pre_json = os.path.join(d, "pretrain.json")
    quotes_res = os.path.join(d, "result.json")
    if os.path.exists(pre) and not os.path.exists(pre_json) and os.path.exists(quotes_res):
        # an encoder of an earlier version of this study: its settings are those of the run's first result
        write_json(pre_json, pretrain_settings(json.load(open(quotes_res))["settings"]))
    if os.path.exists(pre_json) and json.load(open(pre_json)) != pre_settings:
        fail("%s was pretrained with other settings than this study's (scale, model, steps or corpus); delete %s to redo it"
             % (pre, d))
    if os.path.exists(res_path):
        r = json.load(open(res_path))
        if r.get("settings") != settings:
            fail("%s was made with other settings than this study's (scale, model, steps or task); delete %s to redo it"
                 % (res_path, d))
        return r, True
    dev = ["--device", "cuda"] if S["device"] == "cuda" else ["--threads", a.threads]
    t_pre = 0.0
    if os.path.exists(pre) and not os.path.exists(pre_json):
        # a pretraining stopped by a signal (mhe writes a checkpoint it can resume, and exits 130 or 143):
        # resumed to its last step; one that got there says "nothing to train"
        _, t_pre = mhe(a.mhe, ["train", "--resume", pre, "--out", pre, "--data", os.path.join(a.out, "task", "pretrain.txt"),
                               "--quiet"] + dev, log, ok_if="nothing to train")
    if not os.path.exists(pre):
        _, t_pre = mhe(a.mhe, ["train", "--task", "lm", "--arch", "encoder", "--attn", kind, "--data",
                               os.path.join(a.out, "task", "pretrain.txt"), "--out", pre, "--seed", seed, "--quiet",
                               "--eval_every", 0] + (["--tokenizer", a.tok] if a.tok else []) + flags(S["model"])
                      + flags(S["pre"]) + dev, log)
    if not os.path.exists(pre_json):   # only once the pretraining got to its last step
        write_json(pre_json, pre_settings)
    t_ft = 0.0
    if os.path.exists(ft):   # no result yet: a fine-tuning stopped by a signal is resumed, a finished one kept
        _, t_ft = mhe(a.mhe, ["train", "--resume", ft, "--out", ft, "--data", os.path.join(a.tdir, "train.tsv"), "--quiet"]
                      + dev, log, ok_if="nothing to train")
    if not os.path.exists(ft):
        _, t_ft = mhe(a.mhe, ["train", "--task", "cls", "--model", pre, "--data", os.path.join(a.tdir, "train.tsv"),
                              "--out", ft, "--seed", seed, "--quiet", "--eval_every", 0]
                      + flags(S["ft"]) + dev, log)
    out, _ = mhe(a.mhe, ["eval", "--task", "cls", "--model", ft, "--data", os.path.join(a.tdir, "test.tsv"),
                         "--seq_len", S["ft"]["seq_len"]] + dev, log)
    m = re.search(r"acc(?:uracy)?\s*[=:]?\s*([0-9.]+)", out)
    f1 = re.search(r"macro[-_ ]?F1\s*[=:]?\s*([0-9.]+)", out, re.I)
    if not m or not f1:
        fail("cannot read accuracy and macro-F1 from mhe eval's output: %r" % out[-300:])
    att, tot = params_of(ft)
    r = {"settings": settings, "accuracy": float(m.group(1)), "macro_f1": float(f1.group(1)),
         "attention_params": att, "total_params": tot, "seconds": {"pretrain": t_pre, "finetune": t_ft}}
    write_json(res_path, r)
    return r, False


def spread(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def separated(a, b, name_a, name_b, what):
    """a above b? holds / does not hold / not separated, by the sum of their stds"""
    (ma, sa), (mb, sb) = spread(a), spread(b)
    noise = sa + sb
    if len(a) < 2:
        return "cannot tell with one seed: %s %.3f, %s %.3f" % (name_a, ma, name_b, mb)
    if ma - mb > noise:
        return "holds: %s %.3f above %s %.3f by %.3f, more than the sum of their stds %.3f (%s)" % (name_a, ma, name_b, mb, ma - mb, noise, what)
    if mb - ma > noise:
        return "does not hold: %s %.3f below %s %.3f by %.3f, more than the sum of their stds %.3f (%s)" % (name_a, ma, name_b, mb, mb - ma, noise, what)
    return "not separated: %s %.3f vs %s %.3f, a gap of %.3f within the sum of their stds %.3f (%s)" % (name_a, ma, name_b, mb, abs(ma - mb), noise, what)


def retention(prr, name):
    m, s = spread(prr)
    if m - s >= PAPER_PRR_FLOOR:
        return "holds: PRR of %s vs mha %.1f ± %.1f %%, at or above the paper's lowest 92.9 %%" % (name, 100 * m, 100 * s)
    if m + s < PAPER_PRR_FLOOR:
        return "does not hold: PRR of %s vs mha %.1f ± %.1f %%, below the paper's lowest 92.9 %%" % (name, 100 * m, 100 * s)
    return "not separated: PRR of %s vs mha %.1f ± %.1f %% straddles 92.9 %%" % (name, 100 * m, 100 * s)


def svg(rows, path):
    """accuracy per kind, mean with a ±std bar, and each seed as a dot"""
    W, H, L, B = 640, 320, 60, 60
    lo = min(min(r["acc"]) for r in rows) - 0.02
    hi = max(max(r["acc"]) for r in rows) + 0.02
    y = lambda v: H - B - (v - lo) / (hi - lo) * (H - B - 20)
    step = (W - L - 20) / len(rows)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (W, H),
           '<text x="%d" y="14">test accuracy, mean ± std over seeds (dots: seeds)</text>' % L,
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - 10, H - B),
           '<line x1="%d" y1="20" x2="%d" y2="%d" stroke="black"/>' % (L, L, H - B)]
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out.append('<text x="4" y="%.1f">%.3f</text>' % (y(v) + 4, v))
    for i, r in enumerate(rows):
        x = L + step * (i + 0.5)
        m, s = spread(r["acc"])
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#8ab"/>' % (x - step / 4, y(m), step / 2, H - B - y(m)))
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>' % (x, y(m - s), x, y(m + s)))
        for v in r["acc"]:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="#c33"/>' % (x + step / 6, y(v)))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, H - B + 16, r["kind"]))
    out.append("</svg>")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)


def report(a, S, task, results):
    kinds = [k for k in a.kinds if k in results]
    rows = []
    for k in kinds:
        rs = results[k]
        rows.append({"kind": k, "acc": [r["accuracy"] for r in rs], "f1": [r["macro_f1"] for r in rs],
                     "attention_params": rs[0]["attention_params"], "total_params": rs[0]["total_params"]})
    by = {r["kind"]: r for r in rows}
    lines = ["# Downstream study: pretrain, fine-tune, test", "",
             "Tokens: %s. Task: %s (%d classes, %s), train %d, validation %d, test %d examples; "
             "pretraining on %d fortunes entries without a validation or test text. Scale `%s`: %s; pretraining %s; "
             "fine-tuning %s; seeds %s. Baselines on the test split: %s." % (
                 "bytes" if not a.tok else "byte-level BPE, %d tokens (`%s`)" % (a.subwords, os.path.basename(a.tok)),
                 TASKS[a.task], len(task["classes"]), ", ".join(task["classes"]), sum(task["counts"]["train"]), sum(task["counts"]["valid"]),
                 sum(task["counts"]["test"]), task["pretrain_entries"], a.scale, S["model"], S["pre"], S["ft"],
                 ", ".join(map(str, a.seed_list)),
                 "; ".join("%s accuracy %.3f, macro-F1 %.3f" % (n, v["accuracy"], v["macro_f1"])
                           for n, v in task["baselines_test"].items())), "",
             "| kind | attention params | total params | accuracy | macro-F1 | PRR vs MHA (accuracy) | PEoP vs SHA |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        am, asd = spread(r["acc"])
        fm, fsd = spread(r["f1"])
        prr = peop = "—"
        if "mha" in by:
            m, s = spread([x / y for x, y in zip(r["acc"], by["mha"]["acc"])])
            prr = "%.3f ± %.3f" % (m, s)
        if "sha" in by and r["kind"] != "sha" and r["total_params"] != by["sha"]["total_params"]:
            e = [((x / y) - 1) / (r["total_params"] / by["sha"]["total_params"] - 1) for x, y in zip(r["acc"], by["sha"]["acc"])]
            m, s = spread(e)
            peop = "%.2f ± %.2f" % (m, s)
        elif r["kind"] == "sha":
            peop = "(reference)"
        lines.append("| %s | %d | %d | %.3f ± %.3f | %.3f ± %.3f | %s | %s |" % (
            r["kind"], r["attention_params"], r["total_params"], am, asd, fm, fsd, prr, peop))
    claims = []
    if "mha" in by and "sha" in by:
        claims.append(("MHA is better than single-head attention (the reason for multiple heads)",
                       separated(by["mha"]["acc"], by["sha"]["acc"], "mha", "sha", "accuracy")))
    for k in ("mhe-mul", "mhe-add"):
        if k in by and "mha" in by:
            claims.append(("%s keeps at least 92.9 %% of MHA's score (Table 3's lowest PRR)" % k,
                           retention([x / y for x, y in zip(by[k]["acc"], by["mha"]["acc"])], k)))
    if "mhe-mul" in by and "mhe-add" in by:
        claims.append(("MHE-MUL is better than MHE-ADD", separated(by["mhe-mul"]["acc"], by["mhe-add"]["acc"], "mhe-mul", "mhe-add", "accuracy")))
    for k in ("mhe-mul", "mhe-add"):
        if k in by and "sha" in by:
            claims.append(("%s is better than SHA, at almost its parameter count" % k,
                           separated(by[k]["acc"], by["sha"]["acc"], k, "sha", "accuracy")))
    if "mhe-mul" in by and "mha" in by:
        ratio = by["mhe-mul"]["attention_params"] / by["mha"]["attention_params"]
        claims.append(("MHE's attention has a small fraction of MHA's parameters",
                       "holds: mhe-mul's attention parameters are %.1f %% of mha's (%d vs %d), by construction" % (
                           100 * ratio, by["mhe-mul"]["attention_params"], by["mha"]["attention_params"])))
    lines += ["", "Claims (a gap counts when it exceeds the sum of the two standard deviations):", ""]
    lines += ["- %s: %s" % c for c in claims]
    lines += ["", "![test accuracy per kind](downstream.svg)", ""]
    name = "downstream" + ("" if a.task == "quotes" else "-" + a.task) + a.suffix
    lines[-2] = "![test accuracy per kind](%s.svg)" % name
    with open(os.path.join(a.out, name + ".md.tmp"), "w") as f:
        f.write("\n".join(lines))
    os.replace(os.path.join(a.out, name + ".md.tmp"), os.path.join(a.out, name + ".md"))
    write_json(os.path.join(a.out, name + ".json"), {"rows": rows, "claims": claims, "task": task, "task_name": a.task, "scale": S,
                                                    "tokens": "bytes" if not a.tok else "byte-level BPE of %d tokens" % a.subwords})
    svg(rows, os.path.join(a.out, name + ".svg"))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "downstream"))
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mhe", default=None, help="the mhe binary (default build/mhe, build/cuda/mhe for --scale gpu)")
    ap.add_argument("--steps-scale", type=float, default=1.0, help="multiply every step count (a quick look: 0.05)")
    ap.add_argument("--subwords", type=int, default=0, help="byte-level BPE of N tokens instead of bytes (0: bytes)")
    ap.add_argument("--task", choices=sorted(TASKS), default="quotes", help="quotes (8 classes) or pairs (does B continue A)")
    a = ap.parse_args()
    S = json.loads(json.dumps(SCALES[a.scale]))
    for part in ("pre", "ft"):
        S[part]["steps"] = max(1, int(round(S[part]["steps"] * a.steps_scale)))
        S[part]["warmup"] = min(S[part]["warmup"], S[part]["steps"] // 5)
    a.mhe = a.mhe or os.path.join(ROOT, "build", "cuda", "mhe") if S["device"] == "cuda" else a.mhe or os.path.join(ROOT, "build", "mhe")
    a.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    for k in a.kinds:
        if k not in KINDS:
            fail("--kinds: %r is not a kind of the MHE paper's table (%s)" % (k, ", ".join(KINDS)))
    if a.seeds < 1:
        fail("--seeds must be at least 1")
    a.seed_list = [1 + i for i in range(a.seeds)]
    if not os.access(a.mhe, os.X_OK):
        fail("no %s (make%s)" % (a.mhe, " build/cuda/mhe" if S["device"] == "cuda" else ""))
    tdir = os.path.join(a.out, "task")
    script = os.path.join(ROOT, "tools", "scripts", "downstream_task.py")
    if not os.path.exists(os.path.join(tdir, "task.json")):
        if subprocess.run([sys.executable, script, tdir]).returncode != 0:
            fail("the task could not be built (apt-get install fortunes)")
    a.tdir = tdir if a.task == "quotes" else os.path.join(tdir, a.task)
    if a.task == "pairs" and not os.path.exists(os.path.join(a.tdir, "task.json")):
        if subprocess.run([sys.executable, script, "--pairs", tdir]).returncode != 0:
            fail("the pair task could not be built")
    p = subprocess.run([sys.executable, script, "--check", tdir], capture_output=True, text=True)
    if p.returncode != 0:
        fail(p.stderr.strip())
    task = json.load(open(os.path.join(a.tdir, "task.json")))
    a.tok, a.tok_sha, a.suffix = None, None, ""
    if a.subwords:
        if a.subwords < 258:
            fail("--subwords %d: a BPE needs at least 258 tokens (256 bytes, a merge, <mask>)" % a.subwords)
        a.tok, a.suffix = os.path.join(tdir, "bpe-%d.tok" % a.subwords), "-bpe%d" % a.subwords
        if not os.path.exists(a.tok):
            mhe(a.mhe, ["tokenize", "train", "--data", os.path.join(tdir, "pretrain.txt"), "--vocab", a.subwords,
                        "--added", "<mask>", "--out", a.tok], os.path.join(tdir, "tokenize.log"))
        a.tok_sha = hashlib.sha256(open(a.tok, "rb").read()).hexdigest()
    results, t0, done = {}, time.time(), 0
    total = len(a.kinds) * len(a.seed_list)
    for k in a.kinds:
        for s in a.seed_list:
            r, reused = one_run(a, S, task, k, s)
            results.setdefault(k, []).append(r)
            done += 1
            print("[%d/%d] %-8s seed %d: accuracy %.3f, macro-F1 %.3f%s (%.0f s so far)" % (
                done, total, k, s, r["accuracy"], r["macro_f1"], " (reused)" if reused else "", time.time() - t0), flush=True)
    report(a, S, task, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
