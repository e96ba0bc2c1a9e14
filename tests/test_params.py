"""`mhe params` against the MHE paper (Xue and Aletras): the parameter counts of
Tables 1, 3, 14 and 15, the memory model of Table 13, the GPT-3 projection,
the formulas of Table 4 and the data of Figures 3 and 4, in every output format;
the files --out-dir writes; and clean failures on bad options. The paper's
figures below are typed in from the paper on purpose: they are what the tool
must reproduce. Needs only python3 and build/mhe."""
import csv
import os
import re
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, csv_blocks, finish, mhe_missing, run_mhe, skip, tmpdir  # noqa: E402

KINDS = ["sha", "mha", "el-att", "mqa", "gqa", "skv", "mhe-add", "mhe-mul"]


def run(*args, cwd=None):
    return run_mhe("params", *args, cwd=cwd, timeout=120)


def count(kind, dm, n, dh, g=2, wo=False):
    """Parameters of one attention sublayer, from the table in docs/design.md section 4 (no biases)."""
    base = {
        "mha": 3 * dm * n * dh, "sha": 3 * dm * dh, "mqa": dm * n * dh + 2 * dm * dh,
        "gqa": dm * n * dh + 2 * dm * g * dh, "skv": 2 * dm * n * dh, "el-att": dm * n * dh,
        "mhe-add": 3 * dm * dh + 3 * n * dh, "mhe-mul": 3 * dm * dh + 3 * n * dh,
    }[kind]
    return base + (dm * n * dh if wo else 0)


def by(block, key):
    return {r[key]: r for r in block["rows"]} if block else {}


def main():
    why = mhe_missing()
    if why:
        return skip("test_params.py", why)

    rc, out, err = run("--help")
    check(rc == 0 and "usage: mhe params" in out and "--out-dir" in out, "--help: rc %d" % rc)

    # ---- CSV: every number checked against the paper -------------------------------
    rc, out, err = run("--format", "csv")
    check(rc == 0 and err == "", "csv run: rc %d, stderr %r" % (rc, err[-300:]))
    try:
        b = csv_blocks(out)
    except Exception as e:  # noqa: BLE001 - any parse problem is a failure
        check(False, "csv output parses: %s" % e)
        b = {}
    for name in ["Table 4", "Table 1", "Table 3", "Table 14", "Table 15", "Table 13", "GPT-3 projection (section 5.4)",
                 "Figure 3", "Figure 4"]:
        check(name in b and b[name]["rows"], "csv has block %r (got %s)" % (name, list(b)))

    # Table 4: formulas and numbers at the defaults n = 12, d = 64 (no W^O)
    t4 = by(b.get("Table 4"), "kind")
    want_formula = {"sha": ("3nd^2", "0"), "mha": ("3n^2d^2", "(3n^2 - 3n)d^2"), "el-att": ("n^2d^2", "(n^2 - 3n)d^2"),
                    "mqa": ("(n^2 + 2n)d^2", "(n^2 - n)d^2"), "gqa": ("(n^2 + 2gn)d^2", "(n^2 - 3n + 2gn)d^2"),
                    "skv": ("2n^2d^2", "(2n^2 - 3n)d^2"), "mhe-add": ("3nd^2 + 3nd", "3nd"),
                    "mhe-mul": ("3nd^2 + 3nd", "3nd")}
    for k in KINDS:
        r = t4.get(k, {})
        v = count(k, 768, 12, 64)
        check(r.get("params") == str(v), "Table 4 %s params %r, want %d" % (k, r.get("params"), v))
        check(r.get("extra_over_sha") == str(v - count("sha", 768, 12, 64)), "Table 4 %s extra %r" % (k, r.get("extra_over_sha")))
        check((r.get("params_formula"), r.get("extra_over_sha_formula")) == want_formula[k],
              "Table 4 %s formulas %r %r" % (k, r.get("params_formula"), r.get("extra_over_sha_formula")))
    check(t4.get("mha", {}).get("complexity") == "O(n^2d^2)" and t4.get("mhe-mul", {}).get("complexity") == "O(nd^2)"
          and t4.get("sha", {}).get("complexity") == "O(nd^2)", "Table 4 complexities")

    # Table 1: BERT-base, 12 layers, W^O included
    t1 = by(b.get("Table 1"), "kind")
    paper1 = {"sha": "8.85", "mha": "28.31", "el-att": "14.16", "mqa": "15.34", "skv": "21.23", "mhe-add": "8.88", "mhe-mul": "8.88"}
    for k, v in paper1.items():
        r = t1.get(k, {})
        check(r.get("params_M") == v, "Table 1 %s: %r, want %s" % (k, r.get("params_M"), v))
        check(r.get("params") == str(12 * count(k, 768, 12, 64, wo=True)), "Table 1 %s exact %r" % (k, r.get("params")))
    check(t1.get("mha", {}).get("params") == "28311552", "Table 1 MHA exact 28311552")
    check("28.32M" in t1.get("mha", {}).get("note", "") and "erratum" in t1.get("mha", {}).get("note", ""),
          "Table 1 MHA erratum note %r" % t1.get("mha", {}).get("note"))
    check(all("erratum" not in t1.get(k, {}).get("note", "") for k in paper1 if k != "mha"), "Table 1: no other errata")
    check(t1.get("gqa", {}).get("params") == str(12 * count("gqa", 768, 12, 64, 2, wo=True)), "Table 1 gqa with g = 2")

    # Table 3: WMT-14 BASE, 18 attention sublayers
    t3 = by(b.get("Table 3"), "kind")
    paper3 = {"sha": "6.49", "mha": "18.87", "el-att": "9.44", "mqa": "10.62", "skv": "14.16", "mhe-add": "6.52", "mhe-mul": "6.52"}
    for k, v in paper3.items():
        check(t3.get(k, {}).get("params_M") == v, "Table 3 %s: %r, want %s" % (k, t3.get(k, {}).get("params_M"), v))

    # Table 14
    t14 = b.get("Table 14", {"rows": []})["rows"]
    got14 = [(r.get("architecture"), r.get("size"), r.get("mha_M"), r.get("mhe_mul_M")) for r in t14]
    want14 = [("Encoder-only", "BASE", "28.31", "8.88"), ("Encoder-only", "LARGE", "100.66", "29.96"),
              ("Decoder-only", "BASE", "28.31", "8.88"), ("Decoder-only", "MEDIUM", "100.66", "29.96")]
    check(got14 == want14, "Table 14 rows %r" % got14)
    check(all("28.32" in r.get("note", "") for r in t14 if r.get("size") == "BASE"), "Table 14 BASE errata")

    # Table 15: every WMT row
    t15 = b.get("Table 15", {"rows": [], "notes": []})
    got15 = [(r.get("N"), r.get("d_m"), r.get("h"), r.get("d_h"), r.get("mha_M"), r.get("mhe_mul_M")) for r in t15["rows"]]
    want15 = [("12", "512", "8", "64", "18.87", "6.52"), ("12", "512", "16", "32", "18.87", "5.63"),
              ("12", "512", "4", "128", "18.87", "8.29"), ("8", "512", "8", "64", "12.58", "4.34"),
              ("16", "512", "8", "64", "25.17", "8.69"), ("12", "768", "12", "64", "42.47", "13.31"),
              ("12", "1024", "16", "64", "75.50", "22.47")]
    check(got15 == want15, "Table 15 rows %r" % got15)
    check([r.get("model") for r in t15["rows"]][3:] == ["4L", "8L", "12H", "BIG"], "Table 15 model names")
    check(t15["rows"] and t15["rows"][0].get("attention_sublayers") == "18", "Table 15 BASE has 18 attention sublayers")
    check(any("19.87M" in n and "erratum" in n for n in t15["notes"]), "Table 15 Appendix D erratum note")

    # Table 13: the memory model of Appendix C
    t13 = by(b.get("Table 13"), "kind")
    paper13 = {
        "sha": (4423680, 4423680, 5898240, 25165824, 39911424, "44.84"),
        "mha": (14155776, 14155776, 18874368, 25165824, 72351744, "0.00"),
        "el-att": (7077888, 7077888, 9437184, 25165824, 48758784, "32.61"),
        "mqa": (7667712, 7667712, 10223616, 25165824, 50724864, "29.89"),
        "skv": (10616832, 10616832, 14155776, 25165824, 60555264, "16.30"),
        "mhe-add": (4437504, 4437504, 5916672, 25165824, 39957504, "44.77"),
        "mhe-mul": (4437504, 4437504, 5916672, 25165824, 39957504, "44.77"),
    }
    for k, v in paper13.items():
        r = t13.get(k, {})
        got = (r.get("weights_bytes"), r.get("gradients_bytes"), r.get("adam_states_bytes"), r.get("activations_bytes"),
               r.get("total_bytes"), r.get("saving_ratio_pct"))
        check(got == tuple(str(x) for x in v), "Table 13 %s: %r, want %r" % (k, got, v))
    notes13 = " ".join(b.get("Table 13", {"notes": []})["notes"])
    check("2.75x SKV" in notes13 and "1.50x MQA" in notes13 and "1.37x EL-ATT" in notes13,
          "Table 13 MHE saving ratio against SKV/MQA/EL-ATT: %r" % notes13)

    # GPT-3 projection: 96 layers, 96 heads of 128, no W^O
    g3 = by(b.get("GPT-3 projection (section 5.4)"), "kind")
    paper3b = {"mha": "43.49", "el-att": "14.50", "mqa": "14.80", "skv": "28.99", "mhe-add": "0.46", "mhe-mul": "0.46"}
    for k, v in paper3b.items():
        check(g3.get(k, {}).get("params_B") == v, "GPT-3 %s: %r, want %s" % (k, g3.get(k, {}).get("params_B"), v))
    check(g3.get("mha", {}).get("params") == "43486543872", "GPT-3 MHA exact 43486543872")
    check("43.48B" in g3.get("mha", {}).get("note", "") and "erratum" in g3.get("mha", {}).get("note", ""),
          "GPT-3 MHA erratum note %r" % g3.get("mha", {}).get("note"))
    check(g3.get("mhe-mul", {}).get("saving_vs_mha_pct", "").startswith("98.9"), "GPT-3 MHE saves ~98.9%")

    # Figures 3 and 4
    f3 = b.get("Figure 3", {"rows": []})["rows"]
    check(len(f3) >= 8 and f3[-1].get("n") == "128", "Figure 3 goes to 128 heads")
    for r in f3:
        n = int(r["n"])
        for k in KINDS:
            want = "" if (k == "gqa" and n % 2) else str(count(k, 64 * n, n, 64))
            if r.get(k) != want:
                check(False, "Figure 3 n=%d %s: %r, want %r" % (n, k, r.get(k), want))
                break
    check(f3 and int(f3[-1]["mha"]) > 200e6 and int(f3[-1]["mhe-mul"]) < 0.01 * int(f3[-1]["mha"]),
          "Figure 3: MHA over 200M at 128 heads, MHE about 1% of it")
    f4 = {(r["heads"], r["layers"]): r for r in b.get("Figure 4", {"rows": []})["rows"]}
    check(len(f4) == 6, "Figure 4 has 6 rows")
    ok4 = all(f4.get((str(h), str(l)), {}).get(k) == str(l * count(k, 64 * h, h, 64))
              for h in (32, 64) for l in (12, 24, 48) for k in KINDS)
    check(ok4, "Figure 4 values")
    check(f4 and int(f4[("64", "24")]["mha"]) > 1e9 and int(f4[("64", "48")]["mhe-mul"]) < 0.1e9,
          "Figure 4: MHA over 1B at 24 layers of 64 heads, MHE under 0.1B at 48")

    # ---- text: aligned tables carrying the same figures --------------------------------
    rc, out, err = run()
    check(rc == 0, "text run: rc %d %s" % (rc, err))
    for s in ["8.85M", "28.31M", "the paper prints 28.32M", "28,311,552", "14.16M", "15.34M", "21.23M", "8.88M",
              "18.87M", "6.52M", "5.63M", "8.29M", "12.58M", "4.34M", "25.17M", "8.69M", "42.47M", "13.31M",
              "75.50M", "22.47M", "43.49B", "the paper prints 43.48B", "43,486,543,872", "14.50B", "14.80B",
              "28.99B", "0.46B", "72,351,744", "39,957,504", "44.77", "(3n^2 - 3n)d^2", "3nd"]:
        check(s in out, "text output has %r" % s)
    # every table's lines are aligned: all rows of a table have the same width
    widths, aligned = [], True
    for line in out.splitlines() + [""]:
        if line.startswith("|"):
            widths.append(len(line))
        elif widths:
            aligned &= len(set(widths)) == 1
            widths = []
    check(aligned, "text tables are aligned")
    check(out.count("erratum") >= 4, "text has the errata (Table 1, Table 14 x2, GPT-3)")

    # ---- markdown ------------------------------------------------------------------------
    rc, out, err = run("--format", "markdown")
    check(rc == 0 and "### Table 1" in out and "### Table 15" in out, "markdown headings")
    seps = [l for l in out.splitlines() if re.fullmatch(r"\|(:?-{3,}:?\|)+", l)]
    check(len(seps) == 9, "markdown has a header separator per table (%d)" % len(seps))
    check("28.31M" in out and "43.48B" in out, "markdown carries the counts and errata")

    # ---- options --------------------------------------------------------------------------
    rc, out, err = run("--table", "4", "--n", 8, "--d", 32, "--kv-groups", 4, "--format", "csv")
    t = by(csv_blocks(out).get("Table 4"), "kind")
    check(rc == 0 and all(t.get(k, {}).get("params") == str(count(k, 256, 8, 32, 4)) for k in KINDS),
          "Table 4 at n=8, d=32, g=4: %r" % {k: t.get(k, {}).get("params") for k in KINDS})
    rc, out, err = run("--table=1,gpt3", "--format=csv")
    bb = csv_blocks(out)
    check(rc == 0 and set(bb) == {"Table 1", "GPT-3 projection (section 5.4)"}, "--table list: %r" % list(bb))
    rc, out, err = run("--table", "1", "--kv-groups", 5, "--format", "csv")
    g5 = by(csv_blocks(out).get("Table 1"), "kind").get("gqa", {})
    check(rc == 0 and g5.get("params") == "" and "does not divide" in g5.get("note", ""),
          "gqa without a count where g does not divide the heads: %r" % g5)

    # ---- --out-dir ------------------------------------------------------------------------
    d = tmpdir("mhe_params_")
    outdir = os.path.join(d, "out")
    rc, out, err = run("--out-dir", outdir)
    files = sorted(os.listdir(outdir)) if os.path.isdir(outdir) else []
    want_files = sorted(["table4.csv", "table1.csv", "table3.csv", "table14.csv", "table15.csv", "table13.csv",
                         "gpt3.csv", "fig3.csv", "fig4.csv", "fig3.svg", "fig4.svg"])
    check(rc == 0 and files == want_files, "--out-dir files: rc %d %r %s" % (rc, files, err))
    check("wrote " in out, "--out-dir says what it wrote")
    for name in [f for f in files if f.endswith(".csv")]:
        with open(os.path.join(outdir, name), newline="") as f:
            rows = list(csv.DictReader(f))
        check(rows and not any(k.startswith("#") for k in rows[0]), "%s is a plain CSV with a header" % name)
    if "fig3.csv" in files:
        with open(os.path.join(outdir, "fig3.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        check(rows[-1]["n"] == "128" and rows[-1]["mha"] == str(count("mha", 128 * 64, 128, 64)), "fig3.csv data")
    for name, lines in [("fig3.svg", 8), ("fig4.svg", 16)]:
        path = os.path.join(outdir, name)
        try:
            root = ET.parse(path).getroot()
            ns = "{http://www.w3.org/2000/svg}"
            polys = root.iter(ns + "polyline")
            texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
            check(root.tag == ns + "svg" and len(list(polys)) == lines, "%s: svg root and %d polylines" % (name, lines))
            check(all(k.upper() in texts for k in KINDS) and "log scale" in texts, "%s: legend and axis labels" % name)
        except (ET.ParseError, OSError) as e:
            check(False, "%s parses as XML: %s" % (name, e))
    rc, out, err = run("--table", "fig3", "--out-dir", outdir, "--format", "csv")
    check(rc == 0 and "wrote" not in out and csv_blocks(out).get("Figure 3"), "csv stdout stays CSV with --out-dir")
    # nothing is written unless asked
    empty = os.path.join(d, "cwd")
    os.mkdir(empty)
    rc, out, err = run(cwd=empty)
    check(rc == 0 and os.listdir(empty) == [], "no files without --out-dir")

    # ---- collaborative attention, Cordonnier et al. Table 1 (not part of `all`) --------------
    check("Collaborative attention" not in (b.get("Table 1") or {}).get("title", "") and "collab" not in out,
          "collab is not among the MHE paper's tables")
    rc, out, err = run("--table", "collab", "--format", "csv")
    rows = (csv_blocks(out).get("Collaborative attention (Cordonnier et al. 2020, Table 1)") or {}).get("rows", [])
    got = [(r.get("d_in"), r.get("dim"), r.get("params_paper_m"), r.get("macs_1e8")) for r in rows]
    # the paper's Table 1: 1.05 -> 0.66 M params, 1.51 -> 1.09 x1e8 FLOPS (FairSeq, 512 -> 128);
    # 2.36 -> 1.58 M, 3.27 -> 2.65 (BERT-base, 768 -> 256)
    check(rc == 0 and ("512", "512", "1.05", "1.51") in got and ("512", "128", "0.66", "1.09") in got and
          ("768", "768", "2.36", "3.27") in got and ("768", "256", "1.58", "2.65") in got, "collab Table 1: %r" % got)
    qk = {(r.get("d_in"), r.get("dim")): r for r in rows}
    for d_in, nh, dt in [(512, 8, 128), (768, 12, 384), (768, 12, 256), (768, 12, 192)]:
        r = qk.get((str(d_in), str(dt)), {})
        check(r.get("qk_params") == str((2 * d_in + nh) * dt) and r.get("content_bias") == str(nh * d_in) and
              r.get("params") == str((2 * d_in + nh) * dt + nh * d_in + 2 * d_in * d_in),
              "collab D~ %d: (2 D_in + N_h) D~ = %d, got %r" % (dt, (2 * d_in + nh) * dt, r))

    # ---- bad options: `mhe: ...` on stderr, nothing on stdout --------------------------------
    notdir = os.path.join(d, "file")
    open(notdir, "w").close()
    for args, code, word in [(["--bogus"], 2, "--bogus"), (["--format", "xml"], 2, "xml"), (["--table", "7"], 2, "7"),
                             (["--table"], 2, "--table"), (["--n", "abc"], 2, "abc"), (["--d", "1.5"], 2, "1.5"),
                             (["stray"], 2, "stray"), (["--n", "0"], 1, "--n"), (["--d", "-4"], 1, "--d"),
                             (["--kv-groups", "0"], 1, "--kv-groups"), (["--kv-groups", "5"], 1, "divide"),
                             (["--n", "100000000"], 1, "large"), (["--out-dir", notdir], 1, "directory")]:
        rc, out, err = run(*args)
        check(rc == code and err.startswith("mhe: ") and word in err and out == "" and "Traceback" not in err,
              "%s: rc %d (want %d), stdout %d bytes, stderr %r" % (" ".join(args), rc, code, len(out), err.strip()))

    return finish()


if __name__ == "__main__":
    sys.exit(main())
