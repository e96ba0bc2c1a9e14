"""The tool side of thesis chapter 4 ("deconstructing attention"):

- `mhe params --complexity` (Tables 4.5-4.8) against the formulas as the thesis prints
  them, typed in below and evaluated here at several (B, L, d, h, t);
- `mhe generate`'s cache/state bytes per layer against Table 4.8 (float32 = twice the
  table's half-precision bytes where a layer keeps what the table counts) and against
  what each layer keeps by construction (Taylor's state, the shared maps);
- `mhe eval --skip` and `--indicators` (CSV, chart, heat-maps);
- clean refusals of bad input.
Needs only python3 and build/mhe."""
import csv
import os
import re
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, csv_blocks, finish, mhe_missing, skip, tmpdir  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402


# Tables 4.5-4.8 as printed in the thesis (Appendices E-H)
ROWS = ["Standard", "MLP", "Approx.", "Non-apx.", "RndEmbQK", "FixedSeqQK", "StaticEmbQK"]
PRINTED = {
    "4.5": {"Standard": ["BL^2d + BLd^2"], "MLP": ["BLd^2"], "Approx.": ["BLd^2"], "Non-apx.": ["BLd^2"],
            "RndEmbQK": ["BL^2d + BLd^2"], "FixedSeqQK": ["BL^2d + BLd^2"], "StaticEmbQK": ["BL^2d + BLd^2"]},
    "4.6": {"Standard": ["4BL^2d + 6BLd^2", "6Bd^2 + 4BLd"], "MLP": ["6BLd^2", "6Bd^2"],
            "Approx.": ["14BLd^2", "10Bd^2"], "Non-apx.": ["6BLd^2", "6Bd^2"],
            "RndEmbQK": ["2L^2d + 2BL^2d + 6BLd^2", "2Ld + 2BLd + 6Bd^2"],
            "FixedSeqQK": ["2L^2d + 2BL^2d + 6BLd^2", "2Ld + 2BLd + 6Bd^2"],
            "StaticEmbQK": ["4BL^2d + 6BLd^2", "6Bd^2 + 4BLd"]},
    "4.7": {"Standard": ["(8BLd + 2BL^2h)/t"], "MLP": ["8BLd/t"], "Approx.": ["11BLd/t + 3Bd^2/ht"],
            "Non-apx.": ["(8BLd + 4BLh)/t"], "RndEmbQK": ["(4BLd + 8Ld + 2L^2h)/t"],
            "FixedSeqQK": ["(4BLd + 8Ld + 2L^2h)/t"], "StaticEmbQK": ["(8BLd + 2BL^2h)/t"]},
    "4.8": {"Standard": ["4BLd"], "MLP": ["0"], "Approx.": ["6Bd + 4Bd^2/h"], "Non-apx.": ["2Bd + 4Bh"],
            "RndEmbQK": ["2(B + 1)Ld"], "FixedSeqQK": ["2(B + 1)Ld"], "StaticEmbQK": ["4BLd"]},
}
KIND = {"Standard": "mha", "MLP": "mlp", "Approx.": "taylor", "Non-apx.": "nonapprox", "RndEmbQK": "rndemb-qk",
        "FixedSeqQK": "fixedseq-qk", "StaticEmbQK": "staticemb-qk"}


def evaluate(formula, **v):
    """a formula in the thesis's notation: juxtaposition multiplies, ^ raises, and a
    run of letters after / is one denominator ("3Bd^2/ht" = 3 B d^2 / (h t))"""
    s = formula.replace(" ", "")
    s = re.sub(r"/([A-Za-z]+)", lambda m: "/(" + "*".join(m.group(1)) + ")", s)
    out = ""
    for i, ch in enumerate(s):
        if i and (ch.isalpha() or ch == "(") and (s[i - 1].isalnum() or s[i - 1] == ")"):
            out += "*"
        out += ch
    return eval(out.replace("^", "**"), {"__builtins__": {}}, dict(v))


def complexity():
    for B, L, d, h, t in [(1, 2048, 896, 14, 1), (3, 17, 24, 4, 2), (256, 2048, 2048, 16, 8)]:
        rc, out, err = run("params", "--complexity", "--format", "csv", "--B", B, "--L", L, "--d", d, "--h", h, "--t", t)
        check(rc == 0, "params --complexity rc %d: %s" % (rc, err))
        blocks = csv_blocks(out)
        for table, cols in (("4.5", ["complexity_value"]), ("4.6", ["prefill_value", "decode_value"]),
                            ("4.7", ["activation_value"]), ("4.8", ["cache_value"])):
            blk = blocks.get("Table " + table)
            check(blk is not None and [r["attention"] for r in blk["rows"]] == ROWS, "Table %s rows" % table)
            if not blk:
                continue
            for r in blk["rows"]:
                want = PRINTED[table][r["attention"]]
                for k, col in enumerate(cols):
                    v = dict(B=B, L=L, d=d, h=h, t=t)
                    expect = evaluate(want[k], **v)
                    got = float(r[col])
                    fcol = col.replace("_value", "_formula")
                    mine = evaluate(r[fcol], **v)
                    check(abs(got - round(expect)) <= 0.5 + 1e-9 * abs(expect) and abs(mine - expect) <= 1e-6 * max(1, abs(expect)),
                          "Table %s %s %s at B=%d L=%d d=%d h=%d t=%d: tool %s (%s), printed %s = %s"
                          % (table, r["attention"], col, B, L, d, h, t, got, r[fcol], want[k], expect))
                check(r["kind"] == KIND[r["attention"]], "Table %s kind of %s" % (table, r["attention"]))
            if table == "4.8":
                for r in blk["rows"]:   # mhe's float32 bytes: twice the table where the layer keeps what it counts
                    if r["attention"] in ("Standard", "Non-apx.", "StaticEmbQK", "MLP"):
                        check(float(r["mhe_bytes"]) == 2 * float(r["cache_value"]), "Table 4.8 mhe bytes of %s" % r["attention"])
    rc, out, _ = run("params", "--complexity")
    check(rc == 0 and "Table 4.6" in out and "2L^2d + 2BL^2d + 6BLd^2" in out and "Based" in out, "text output with notes")
    for args, code in (([ "--complexity", "--n", "3"], 2), (["--B", "3"], 2), (["--complexity", "--d", "100", "--h", "14"], 1),
                       (["--complexity", "--L", "0"], 1), (["--complexity", "--table", "4"], 2)):
        rc, out, err = run("params", *args)
        check(rc == code and err.startswith("mhe: ") and not out, "params %s: rc %d (want %d): %s" % (" ".join(args), rc, code, err))


def generate(tmp):
    model = os.path.join(tmp, "g.safetensors")
    rc, out, err = run("init", "--attn", "mha,mlp,nonapprox,staticemb-qk,rndemb-qk,taylor", "--n_layers", 6,
                       "--d_model", 24, "--n_heads", 4, "--max_seq_len", 40, "--out", model)
    check(rc == 0, "init: %s" % err)
    # 2 prompt bytes and 15 new tokens: 16 cache positions (the last token is sampled, not decoded)
    rc, out, err = run("generate", "--model", model, "--prompt", "ab", "--n", 15, "--seed", 3)
    check(rc == 0, "generate: %s" % err)
    L, d, h, dh = 16, 24, 4, 6
    F = 1 + dh + dh * (dh + 1) // 2
    lines = {int(m.group(1)): (m.group(2), int(m.group(3)), m.group(4)) for m in
             re.finditer(r"layer (\d+) (\S+)\s+(\d+) B(.*)", err)}
    check(len(lines) == 6, "six per-layer cache lines:\n%s" % err)
    want = {"mha": 2 * 4 * L * d, "mlp": 0, "nonapprox": 2 * (2 * d + 4 * h), "staticemb-qk": 2 * 4 * L * d,
            "rndemb-qk": 2 * 2 * L * d, "taylor": 4 * h * (F * dh + F)}
    for l, (kind, nbytes, rest) in lines.items():
        check(want.get(kind) == nbytes, "generate: layer %d %s keeps %d bytes, want %s" % (l, kind, nbytes, want.get(kind)))
        m = re.search(r"Table 4.8 (.+?) = (\d+) B", rest)
        check(m is not None and int(m.group(2)) == round(evaluate(PRINTED["4.8"][[k for k, v in KIND.items() if v == kind][0]][0],
                                                                     B=1, L=L, d=d, h=h)),
              "generate: layer %d %s prints Table 4.8's value: %s" % (l, kind, rest))
        if kind == "rndemb-qk":
            check("+ %d B maps shared" % (4 * h * L * (L + 1) // 2) in rest, "generate: rndemb-qk's shared maps: %s" % rest)


def eval_skip_indicators(tmp):
    data = os.path.join(tmp, "d.txt")
    with open(data, "w") as f:
        f.write(("In the beginning was the word, and the word was with the text. " * 40))
    hyb = os.path.join(tmp, "h.safetensors")
    rc, out, err = run("init", "--attn", "nonapprox@even", "--n_layers", 4, "--d_model", 16, "--n_heads", 2,
                       "--max_seq_len", 32, "--init_std", "0.2", "--out", hyb)
    check(rc == 0, "init hybrid: %s" % err)
    rc, out, err = run("eval", "--model", hyb, "--data", data, "--seq_len", 32, "--batches", 2)
    rc2, out2, err2 = run("eval", "--model", hyb, "--data", data, "--seq_len", 32, "--batches", 2, "--skip")
    ppl = lambda s: float(re.search(r"perplexity ([0-9.]+)", s).group(1))
    check(rc == 0 and rc2 == 0 and "layers 0 (nonapprox) 2 (nonapprox)" in out2 and ppl(out) != ppl(out2),
          "eval --skip names the skipped layers and changes the loss: %s / %s" % (out.strip(), out2.strip()))
    mha = os.path.join(tmp, "m.safetensors")
    run("init", "--n_layers", 2, "--d_model", 16, "--n_heads", 2, "--max_seq_len", 32, "--out", mha)
    rc, out, err = run("eval", "--model", mha, "--data", data, "--seq_len", 32, "--skip")
    check(rc == 1 and "nothing to skip" in err, "eval --skip on an all-mha model: rc %d %s" % (rc, err))
    enc = os.path.join(tmp, "e.safetensors")
    rc, out, err = run("init", "--arch", "encoder", "--attn", "mha,fnet,mlp,taylor", "--n_layers", 4, "--d_model", 16,
                       "--n_heads", 2, "--max_seq_len", 32, "--out", enc)
    prefix = os.path.join(tmp, "ind")
    rc, out, err = run("eval", "--model", enc, "--data", data, "--seq_len", 16, "--batch", 4, "--batches", 2,
                       "--indicators", prefix, "--map-len", 12)
    check(rc == 0, "eval --indicators: %s" % err)
    rows = list(csv.DictReader(open(prefix + ".csv")))
    check(len(rows) == 4 * 3 and rows[0]["kind"] == "mha" and "headdiv" in rows[0] and "locfoc3" in rows[0],
          "indicators CSV: a row per layer and head and a mean row")
    check(all(r["entropy"] == "" for r in rows if r["kind"] == "fnet"), "fnet rows are empty (no map)")
    mlp = [r for r in rows if r["kind"] == "mlp"]
    check(all(float(r["locfoc0"]) == 1 and float(r["entropy"]) == 0 for r in mlp), "mlp: the identity map")
    for r in rows:
        if r["kind"] in ("mha", "taylor"):
            check(0 <= float(r["entropy_norm"]) <= 1.0000001 and 0 <= float(r["sink"]) <= 1, "indicator ranges %r" % r)
    for suffix, what in ((".svg", "polyline"), ("_maps.svg", "rect")):
        try:
            root = ET.parse(prefix + suffix).getroot()
            n = sum(1 for e in root.iter() if e.tag.endswith(what))
        except (ET.ParseError, OSError) as e:
            n = 0
            print("  %s%s: %s" % (prefix, suffix, e))
        check(n > 4, "%s%s parses and draws %d %s elements" % (prefix, suffix, n, what))
    check("locfoc0" in out and "wrote" in out, "indicators printed")


def refusals(tmp):
    out_path = os.path.join(tmp, "bad.safetensors")
    for args, want in ((["--attn", "fnet"], "causal"), (["--attn", "mha,linear", "--n_layers", 2], "causal"),
                       (["--attn", "nonapprox@sideways"], "sideways"), (["--attn", "mlp,taylor", "--n_layers", 3], "n_layers"),
                       (["--attn", "fixedseq-qk", "--max_seq_len", 8, "--fixed_seq", "longer than eight"], "max_seq_len"),
                       (["--arch", "encdec", "--enc_layers", 1, "--cross_attn", "fnet"], "itself"),
                       (["--attn", "rndemb-qk,fixedseq-qk", "--n_layers", 2], "one fixed stream")):
        rc, out, err = run("init", *args, "--out", out_path)
        check(rc == 1 and want in err and not os.path.exists(out_path), "init %s refused naming %r: rc %d %s" % (args, want, rc, err.strip()))


def main():
    why = mhe_missing()
    if why:
        return skip("test_decon.py", why)
    tmp = tmpdir("mhe_decon_")
    complexity()
    generate(tmp)
    eval_skip_indicators(tmp)
    refusals(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
