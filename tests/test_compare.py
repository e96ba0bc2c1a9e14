"""mhe compare, on tiny data: the report's numbers equal those of separate mhe
init/train/eval runs of the same settings (weights byte for byte, perplexity and
accuracy to the digits printed), for language modelling and for the downstream
protocol (pretrain, fine-tune, test); a study stopped by SIGINT at several
points, or killed outright, resumes to the report of an unbroken one; a rerun
with other settings is refused naming the setting; each bad input (an unknown
kind, a kind listed twice, fnet in a decoder, data too short for one window, a
label outside the classes, a test text in the pretraining corpus or the
training set, an output that is an input) is refused before any run starts;
the three SVG plots parse and their points, mapped back through their axes,
equal report.json; examples/my_attention.c runs the same study on its own
kind and mha from the program, its report naming both with finite numbers."""
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import xml.dom.minidom

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, build_dir, check, finish, mhe_missing, repo_path, run_mhe, skip, tmpdir  # noqa: E402

NAME = "test_compare.py"
KINDS = ["mha", "sha", "mhe-mul"]
MODEL = ["--d_model", "16", "--n_heads", "2", "--n_layers", "1", "--max_seq_len", "16"]
TRAIN = ["--steps", "6", "--batch", "2", "--seq_len", "16", "--lr", "3e-3", "--warmup", "1", "--eval_every", "3",
         "--eval_batches", "2", "--save_every", "2"]


def with_flags(args, **flags):
    """args with the value of each --flag replaced (or the flag added); names as keyword_args of flag-names"""
    args = list(args)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-") if name == "init_seed" else "--" + name
        if flag in args:
            args[args.index(flag) + 1] = str(value)
        else:
            args += [flag, str(value)]
    return args


def lm_args(d, out, **flags):
    return with_flags(["compare", "--data", os.path.join(d, "train.txt"), "--valid", os.path.join(d, "valid.txt"), "--kinds", ",".join(KINDS),
            "--seeds", "2", "--seed", "5", "--init-seed", "42", "--batches", "4", "--out", out, "--threads", "1", "--quiet"]
                      + MODEL + TRAIN, **flags)


def tensors(path):
    """name -> raw bytes of every tensor of a safetensors file"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items() if k != "__metadata__"}


def equal_to_separate_lm(d, out):
    """kind mhe-mul, seed 1 of the study against mhe init + train + eval with its seeds"""
    rep = json.load(open(os.path.join(out, "report.json")))
    row = [k for k in rep["kinds"] if k["kind"] == "mhe-mul"][0]
    init, ck = os.path.join(d, "init.safetensors"), os.path.join(d, "sep.safetensors")
    rc, _, err = run_mhe("init", "--attn", "mhe-mul", "--seed", 43, "--out", init, *MODEL)
    check(rc == 0, "mhe init: %s" % err)
    rc, _, err = run_mhe("train", "--model", init, "--data", os.path.join(d, "train.txt"), "--valid", os.path.join(d, "valid.txt"),
                         "--seed", 6, "--out", ck, "--threads", 1, "--quiet", *TRAIN)
    check(rc == 0, "mhe train: %s" % err)
    rc, out_eval, err = run_mhe("eval", "--model", ck, "--data", os.path.join(d, "valid.txt"), "--batches", 4, "--batch", 2,
                                "--seq_len", 16)
    check(rc == 0, "mhe eval: %s" % err)
    if rc != 0:
        return
    a, b = tensors(ck), tensors(os.path.join(out, "runs", "mhe-mul-s1", "checkpoint.safetensors"))
    check(a.keys() == b.keys() and all(a[k] == b[k] for k in a), "the study's checkpoint has the weights and moments of mhe train's")
    ppl = float(out_eval.split("perplexity")[1].split()[0])
    check(abs(row["metric"][1] - ppl) < 0.0006, "report perplexity %.6f, mhe eval's %.3f" % (row["metric"][1], ppl))
    # the statistics from the per-seed numbers: mean, sample std, t interval
    m = row["metric"]
    mean, sd = sum(m) / 2, abs(m[0] - m[1]) / math.sqrt(2)
    st = row["metric_stats"]
    half = 12.7062047 * sd / math.sqrt(2)
    check(abs(st["mean"] - mean) < 1e-9 and abs(st["std"] - sd) < 1e-9 and abs(st["ci95"][1] - mean - half) < 1e-5 * max(1, half),
          "mean, std and 95 %% interval from the seeds: %s" % st)
    mha = [k for k in rep["kinds"] if k["kind"] == "mha"][0]["metric"]
    check(all(abs(p - (1 - (x - y) / y)) < 1e-12 for p, x, y in zip(row["prr"], m, mha)), "PRR per seed against mha")


def svg_values(out):
    """the plots' points mapped back through their axes, against report.json"""
    rep = json.load(open(os.path.join(out, "report.json")))
    by = {k["kind"]: k for k in rep["kinds"]}
    try:
        docs = {n: xml.dom.minidom.parse(os.path.join(out, n)) for n in ("final.svg", "tradeoff.svg", "curves.svg")}
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        check(False, "an SVG does not parse: %s" % e)
        return
    for name, doc in docs.items():
        axes = [g for g in doc.getElementsByTagName("g") if g.hasAttribute("data-y0")]
        check(len(axes) == 1, "%s: one plot with its axes" % name)
        if not axes:
            continue
        ax = {k: float(axes[0].getAttribute("data-" + k)) for k in ("left", "right", "top", "bottom", "x0", "x1", "y0", "y1", "logx")}
        y_of = lambda py: ax["y0"] + (ax["bottom"] - py) / (ax["bottom"] - ax["top"]) * (ax["y1"] - ax["y0"])  # noqa: E731
        tol = 2e-4 * (ax["y1"] - ax["y0"])
        groups = {g.getAttribute("data-kind"): g for g in doc.getElementsByTagName("g") if g.hasAttribute("data-kind")}
        check(set(groups) == set(by), "%s: a group per kind: %s" % (name, sorted(groups)))
        for kind, g in groups.items():
            if kind not in by:
                continue
            if name == "final.svg":
                seeds = sorted(y_of(float(c.getAttribute("cy"))) for c in g.getElementsByTagName("circle"))
                check(len(seeds) == 2 and all(abs(a - b) < tol for a, b in zip(seeds, sorted(by[kind]["metric"]))),
                      "final.svg: %s's seed points %s are the report's %s" % (kind, seeds, by[kind]["metric"]))
                iv = [l for l in g.getElementsByTagName("line") if l.getAttribute("class") == "interval"][0]
                lo, hi = sorted((y_of(float(iv.getAttribute("y1"))), y_of(float(iv.getAttribute("y2")))))
                ci = by[kind]["metric_stats"]["ci95"]
                check(abs(lo - ci[0]) < tol and abs(hi - ci[1]) < tol, "final.svg: %s's interval %s is the report's %s" % (kind, (lo, hi), ci))
            elif name == "tradeoff.svg":
                c = g.getElementsByTagName("circle")[0]
                f = (float(c.getAttribute("cx")) - ax["left"]) / (ax["right"] - ax["left"])
                params = 10 ** (math.log10(ax["x0"]) + f * (math.log10(ax["x1"]) - math.log10(ax["x0"])))
                check(abs(params / by[kind]["attention_params"] - 1) < 1e-4 and
                      abs(y_of(float(c.getAttribute("cy"))) - by[kind]["metric_stats"]["mean"]) < tol,
                      "tradeoff.svg: %s at %.1f parameters, the report's %d" % (kind, params, by[kind]["attention_params"]))
            else:
                rows = [l.split(",") for l in open(os.path.join(out, "curves.csv")).read().splitlines()[1:]]
                vals = {}
                for k, s, step, v in rows:
                    if k == kind:
                        vals.setdefault(int(step), []).append(float(v))
                line = [p for p in g.getElementsByTagName("polyline") if p.getAttribute("class") == "mean"][0]
                pts = [tuple(map(float, p.split(","))) for p in line.getAttribute("points").split()]
                want = [sum(v) / len(v) for _, v in sorted(vals.items())]
                check(len(pts) == len(want) == 2 and all(abs(y_of(py) - w) < tol for (_, py), w in zip(pts, want)),
                      "curves.svg: %s's mean curve is curves.csv's: %s vs %s" % (kind, [y_of(p[1]) for p in pts], want))


def numbers(out):
    """report.json's kinds without the times (which differ from run to run)"""
    return [{k: v for k, v in row.items() if k != "seconds"} for row in json.load(open(os.path.join(out, "report.json")))["kinds"]]


def resume(d):
    """stops at several points (SIGINT after a progress line; SIGKILL), each resumed to an unbroken run's report"""
    slow = {"steps": 60, "eval_every": 20, "save_every": 7}
    base = os.path.join(d, "slow")
    subprocess.run([MHE] + lm_args(d, base, **slow), capture_output=True, timeout=120)
    want = numbers(base)
    curves = open(os.path.join(base, "curves.csv")).read()
    for n, (trigger, sig) in enumerate((("[1/6]", signal.SIGINT), ("[4/6]", signal.SIGINT), ("[3/6]", signal.SIGKILL))):
        out = os.path.join(d, "stop%d" % n)
        args = [a for a in lm_args(d, out, **slow) if a != "--quiet"]
        p = subprocess.Popen([MHE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in p.stdout:
            if line.startswith(trigger):
                p.send_signal(sig)
                break
        rest, err = p.communicate(timeout=60)
        stopped = not os.path.exists(os.path.join(out, "report.json"))
        if sig == signal.SIGINT:
            check(p.returncode in (0, 130) and (p.returncode == 0 or "resumes the study" in err),
                  "stop %d: SIGINT ends with 130 and says how to resume: %d %s" % (n, p.returncode, err.strip()))
        rc, _, err = run_mhe(*lm_args(d, out, **slow))
        got = numbers(out) if rc == 0 else None
        check(stopped and rc == 0 and got == want and open(os.path.join(out, "curves.csv")).read() == curves,
              "stop %d (%s after '%s', %s): the resumed report equals the unbroken one: %d %s" % (
                  n, sig.name, trigger, "stopped midway" if stopped else "had finished", rc, err.strip()))


def refusals(d, out):
    """every bad input before the first step; the study's folder untouched"""
    def refused(args, words, what, rc_want=(1, 2)):
        target = os.path.join(d, "refused")
        shutil.rmtree(target, ignore_errors=True)
        args = [target if a == "@OUT" else a for a in args]
        rc, _, err = run_mhe(*args)
        runs = os.path.join(target, "runs")
        nothing = not os.path.isdir(runs) or not os.listdir(runs)
        check(rc in rc_want and all(w in err for w in words) and nothing, "%s: exit %d, stderr %r" % (what, rc, err.strip()))
    base = lm_args(d, "@OUT")
    refused(with_flags(base, kinds="mha,nope"), ["nope", "unknown kind"], "an unknown kind")
    refused(with_flags(base, kinds="mha,sha,mha"), ["mha", "listed twice"], "a kind listed twice")
    refused(with_flags(base, kinds="mha,fnet"), ["fnet", "encoder"], "fnet in a decoder")
    short = os.path.join(d, "short.txt")
    with open(short, "w") as f:
        f.write("too short\n")
    refused(with_flags(base, data=short), ["--data", "short.txt", "window"], "data shorter than one window")
    rc, _, err = run_mhe(*lm_args(d, out, valid=os.path.join(out, "report.md")))
    check(rc == 1 and "report.md" in err and "--valid" in err and "refused" in err, "an output that is an input: %d %s" % (rc, err.strip()))
    refused(with_flags(base, pairs="mha:gqa"), ["--pairs", "gqa"], "a pair of a kind not studied")
    # a rerun of the finished study with another setting
    rc, _, err = run_mhe(*lm_args(d, out, lr="1e-3"))
    check(rc == 1 and "--lr" in err and "refused" in err, "a rerun with another --lr: %d %s" % (rc, err.strip()))
    rc, _, err = run_mhe(*lm_args(d, out, seeds=3))
    check(rc == 1 and "--seeds" in err, "a rerun with more --seeds: %d %s" % (rc, err.strip()))
    # the device path is build/cuda/mhe's (tests/cuda/cli.sh runs it on the emulation)
    refused(with_flags(base, device="cuda"), ["--device cuda", "without CUDA"], "--device cuda in a tool built without CUDA")


def my_attention_study(d):
    """examples/my_attention.c compares its own kind with mha by calling the study itself"""
    exe = repo_path(os.path.join(build_dir(), "examples", "my_attention"))
    exe = exe if os.path.isfile(exe) else exe + ".exe"
    if not os.path.isfile(exe):
        print("note: no %s: the example's study is not run" % exe)
        return
    runner = os.environ.get("MHE_TEST_RUNNER", "").split()
    out = os.path.join(d, "my_attention")
    p = subprocess.run(runner + [exe, "--steps", "2", "--seeds", "2", "--out", out], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    check(p.returncode == 0, "my_attention --steps 2 --seeds 2: exit %d %s" % (p.returncode, p.stderr.strip()))
    if p.returncode != 0:
        return
    rep = json.load(open(os.path.join(out, "report.json")))
    by = {k["kind"]: k for k in rep["kinds"]}
    finite = all(len(k["metric"]) == 2 and all(math.isfinite(x) and x > 1 for x in k["metric"] + k["metric_stats"]["ci95"])
                 for k in by.values())
    check(set(by) == {"qknorm", "mha"} and finite and all(math.isfinite(x) for x in by["qknorm"].get("prr", [math.nan])),
          "my_attention's report: qknorm and mha with finite perplexities and PRR: %s" % {k: v["metric"] for k, v in by.items()})
    claim = [c["verdict"] for c in rep["claims"] if c["claim"].startswith("qknorm is better than mha")]
    check(len(claim) == 1 and claim[0].split(":")[0] in ("holds", "does not hold", "not separated"),
          "my_attention's report tests qknorm against mha: %s" % claim)
    p = subprocess.run(runner + [exe, "--steps", "0"], cwd=REPO, capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--steps 0" in p.stderr, "my_attention --steps 0: exit %d %s" % (p.returncode, p.stderr.strip()))


def cls_study(d):
    """the downstream protocol on a synthetic task, against separate runs; its refusals"""
    words = ["apple", "river", "stone", "cloud", "green", "quiet", "north", "light"]
    lines, rows = [], {"train": [], "valid": [], "test": []}
    for i in range(160):
        c = i % 2
        text = " ".join(words[(i * 7 + j * (3 if c else 5)) % 8] for j in range(6)) + " %d" % i
        split = "test" if i % 10 == 0 else "valid" if i % 10 == 1 else "train"
        rows[split].append("%d\t%s" % (c, text))
        if split == "train":
            lines.append(text)
    for i in range(200):
        lines.append(" ".join(words[(i * 3 + j) % 8] for j in range(8)))
    files = {n: os.path.join(d, n) for n in ("pre.txt", "train.tsv", "valid.tsv", "test.tsv")}
    open(files["pre.txt"], "w").write("\n".join(lines) + "\n")
    for s in rows:
        open(files[s + ".tsv"], "w").write("\n".join(rows[s]) + "\n")
    model = ["--d_model", "16", "--n_heads", "2", "--n_layers", "1", "--max_seq_len", "32"]
    ft = ["--steps", "6", "--batch", "4", "--seq_len", "32", "--lr", "2e-3", "--warmup", "1", "--min_lr", "0", "--eval_every", "3"]
    out = os.path.join(d, "cls")
    args = ["compare", "--task", "cls", "--pretrain", files["pre.txt"], "--train", files["train.tsv"], "--valid", files["valid.tsv"],
            "--test", files["test.tsv"], "--kinds", "mha,mhe-mul", "--seeds", "2", "--seed", "3", "--out", out, "--threads", "1",
            "--quiet", "--pretrain-fields", "steps=8 lr=3e-3 batch=4"] + model + ft
    rc, _, err = run_mhe(*args)
    check(rc == 0, "cls study: %d %s" % (rc, err.strip()))
    if rc != 0:
        return
    rep = json.load(open(os.path.join(out, "report.json")))
    row = [k for k in rep["kinds"] if k["kind"] == "mhe-mul"][0]
    pre, fine = os.path.join(d, "pre.safetensors"), os.path.join(d, "ft.safetensors")
    rc1, _, e1 = run_mhe("train", "--task", "lm", "--arch", "encoder", "--attn", "mhe-mul", "--data", files["pre.txt"], "--out", pre,
                         "--seed", 4, "--quiet", "--threads", 1, "--steps", 8, "--lr", "3e-3", "--batch", 4, "--seq_len", 32,
                         "--warmup", 1, "--min_lr", 0, "--eval_every", 3, *model)
    rc2, _, e2 = run_mhe("train", "--task", "cls", "--model", pre, "--data", files["train.tsv"], "--out", fine, "--seed", 4, "--quiet",
                         "--threads", 1, *ft)
    rc3, ev, e3 = run_mhe("eval", "--task", "cls", "--model", fine, "--data", files["test.tsv"], "--batch", 4, "--seq_len", 32)
    check(rc1 == rc2 == rc3 == 0, "separate pretrain, fine-tune, eval: %s %s %s" % (e1, e2, e3))
    if rc3 == 0:
        a, b = tensors(fine), tensors(os.path.join(out, "runs", "mhe-mul-s1", "finetune.safetensors"))
        check(a.keys() == b.keys() and all(a[k] == b[k] for k in a), "cls: the study's fine-tuned model is mhe train's, byte for byte")
        acc = float(ev.split("accuracy")[1].split()[0])
        f1 = float(ev.split("macro-F1")[1].split()[0])
        check(abs(row["metric"][1] - acc) < 6e-5 and abs(row["macro_f1"][1] - f1) < 6e-5,
              "cls: report accuracy %.5f and macro-F1 %.5f, mhe eval's %.4f %.4f" % (row["metric"][1], row["macro_f1"][1], acc, f1))
    # a test text in the pretraining corpus, then in the training set; a label outside the classes
    test_text = rows["test"][2].split("\t", 1)[1]
    for name, extra, words in (("pre.txt", test_text + "\n", ["--test", "line 3", "--pretrain"]),
                               ("train.tsv", rows["test"][2] + "\n", ["--test", "line 3", "--train"]),
                               ("test.tsv", "5\tan example of a class no one has\n", ["--test", "label 5", "classes"])):
        bad = os.path.join(d, "bad_" + name)
        open(bad, "w").write(open(files[name]).read() + extra)
        target = os.path.join(d, "cls_bad")
        bad_args = [bad if a == files[name] else target if a == out else a for a in args]
        rc, _, err = run_mhe(*bad_args)
        check(rc == 1 and all(w in err for w in words) and not os.path.isdir(os.path.join(target, "runs")),
              "cls: %s refused before any run: %d %s" % (name, rc, err.strip()))


def main():
    why = mhe_missing()
    if why:
        return skip(NAME, why)
    d = tmpdir("mhe_compare_")
    data = open(os.path.join(REPO, "examples", "data", "train.txt"), "rb").read()
    open(os.path.join(d, "train.txt"), "wb").write(data[:20000])
    open(os.path.join(d, "valid.txt"), "wb").write(open(os.path.join(REPO, "examples", "data", "valid.txt"), "rb").read()[:3000])
    out = os.path.join(d, "study")
    t0 = time.time()
    rc, _, err = run_mhe(*lm_args(d, out))
    check(rc == 0, "the tiny study: %d %s" % (rc, err.strip()))
    if rc != 0:
        return finish()
    md = open(os.path.join(out, "report.md")).read()
    check(all("| %s |" % k in md for k in KINDS) and md.count("- ") >= 4 and "Welch" in md, "report.md: a row per kind and the claims")
    equal_to_separate_lm(d, out)
    svg_values(out)
    refusals(d, out)
    resume(d)
    cls_study(d)
    my_attention_study(d)
    print("(%.1f s)" % (time.time() - t0))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
