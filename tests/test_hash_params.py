"""`mhe params --embeddings` against HashFormers' Table 2.2 (thesis chapter 2):
the #Emb Params, #Total Params, PCR (All, Emb) and PoEP columns, checked
against the figures the thesis prints (typed in here on purpose: they are what
the tool must reproduce), against independent counts from the thesis formulas
(eq. 2.9-2.15), and the errata notes where no consistent count gives the
printed figure. Needs only python3 and build/mhe."""
import csv
import io
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, finish, mhe_missing, run_mhe, skip, tmpdir  # noqa: E402


def run(*args):
    return run_mhe("params", *args, timeout=60)


def rows_of(text):
    lines = [l for l in text.splitlines() if l and not l.startswith("#")]
    return {r["model"]: r for r in csv.DictReader(io.StringIO("\n".join(lines)))}


def short(v):
    return "%.1fM" % (v / 1e6) if v >= 1e6 else "%.1fK" % (v / 1e3)


# Table 2.2 as printed (HashFormers-MD and -LSH rows are identical): #Emb, PCR Emb, #Total, PCR All, PoEP
PAPER = {
    "BERT-MLM": ("38.6M", None, "124.6M", None, None),
    "CANINE-C": ("12.3M", "68.1", "121.0M", "2.9", "10.2"),
    "ProFormer": ("322.6K", "99.2", "15.1M", "87.9", "2.1"),
    "HashFormers Emb (50K)": ("38.6M", "0.0", "124.6M", "0.0", "31.0"),
    "HashFormers Emb (1K)": ("797.2K", "97.9", "86.8M", "30.3", "1.0"),
    "HashFormers Pool": ("797.2K", "97.9", "86.8M", "30.3", "1.0"),
    "HashFormers Add": ("197.4K", "99.5", "86.2M", "30.8", "0.2"),
    "HashFormers Proj": ("99.1K", "99.7", "86.1M", "30.9", "0.1"),
}
# (row, column) where the printed figure is an erratum: the tool prints the exact value and a note
ERRATA = {("CANINE-C", "pcr_emb"), ("HashFormers Emb (1K)", "poep"), ("HashFormers Pool", "poep")}


def main():
    why = mhe_missing()
    if why:
        return skip("test_hash_params.py", why)

    rc, out, err = run("--embeddings", "--format", "csv")
    check(rc == 0 and err == "", "csv run: rc %d, stderr %r" % (rc, err[-300:]))
    rows = rows_of(out)
    check(set(rows) == set(PAPER), "rows %r" % sorted(rows))

    # independent counts from the thesis's formulas, d = 768, T = 128, k = 10
    d, T, k = 768, 128, 10
    chunks = math.ceil(T / k)
    emb = {"BERT-MLM": 50265 * d, "CANINE-C": 16000 * d, "ProFormer": 420 * d,
           "HashFormers Emb (50K)": 50260 * d, "HashFormers Emb (1K)": (chunks + 2 ** k + 1) * d,
           "HashFormers Pool": (chunks + 2 ** k) * d + d,  # eq. 2.13 + the "regular token" row
           "HashFormers Add": 2 * T * d + d, "HashFormers Proj": T * d + d}
    check(emb["HashFormers Proj"] == 99072, "Proj is 129 x 768")
    for name, (p_emb, p_pcr_emb, p_total, p_pcr_all, p_poep) in PAPER.items():
        r = rows.get(name, {})
        check(r.get("emb_params") == str(emb[name]), "%s #Emb %r, want %d" % (name, r.get("emb_params"), emb[name]))
        check(r.get("emb_short") == p_emb, "%s #Emb %r, paper %s" % (name, r.get("emb_short"), p_emb))
        check(short(int(r.get("emb_params", "0") or 0)) == p_emb, "%s exact #Emb rounds to the paper's %s" % (name, p_emb))
        pcr_emb = 100 * (1 - emb[name] / emb["BERT-MLM"])
        check(r.get("pcr_emb_pct") == "%.1f" % pcr_emb, "%s PCR Emb %r vs %.3f" % (name, r.get("pcr_emb_pct"), pcr_emb))
        if p_pcr_emb is not None:
            erratum = (name, "pcr_emb") in ERRATA
            check((r.get("pcr_emb_pct") == p_pcr_emb) != erratum,
                  "%s PCR Emb %r, paper %s%s" % (name, r.get("pcr_emb_pct"), p_pcr_emb, " (erratum)" if erratum else ""))
        if name in ("CANINE-C", "ProFormer"):
            check(r.get("total_params") == "" and "not modelled" in r.get("note", ""), "%s total not modelled" % name)
            continue
        check(r.get("total_short") == p_total, "%s #Total %r, paper %s" % (name, r.get("total_short"), p_total))
        if p_pcr_all is not None:
            check(r.get("pcr_all_pct") == p_pcr_all, "%s PCR All %r, paper %s" % (name, r.get("pcr_all_pct"), p_pcr_all))
            erratum = (name, "poep") in ERRATA
            check((r.get("poep_pct") == p_poep) != erratum,
                  "%s PoEP %r, paper %s%s" % (name, r.get("poep_pct"), p_poep, " (erratum)" if erratum else ""))
            if erratum:
                check("erratum" in r.get("note", "") and p_poep in r.get("note", ""), "%s erratum note %r" % (name, r.get("note")))
        total = int(r.get("total_params", "0") or 0)
        check(r.get("poep_pct") == "%.1f" % (100 * emb[name] / total if total else -1), "%s PoEP from its own counts" % name)
    can = rows.get("CANINE-C", {})
    check("erratum" in can.get("note", "") and "68.1" in can.get("note", ""), "CANINE-C PCR Emb erratum note")
    # the totals: RoBERTa-base without token embeddings, plus a binary head, is the same for every row
    body = {n: int(r["total_params"]) - m for n, r, m in [
        ("BERT-MLM", rows.get("BERT-MLM", {"total_params": "0"}), 50265 * d),
        ("Emb (50K)", rows.get("HashFormers Emb (50K)", {"total_params": "0"}), (50260 + 5) * d),
        ("Pool", rows.get("HashFormers Pool", {"total_params": "0"}), (2 ** k + 1 + chunks + 6) * d),
        ("Add", rows.get("HashFormers Add", {"total_params": "0"}), (2 * T + 6) * d),
        ("Proj", rows.get("HashFormers Proj", {"total_params": "0"}), (T + 6) * d)]}
    layer = 4 * (d * d + d) + 2 * 2 * d + (d * 3072 + 3072) + (3072 * d + d)
    want_body = (514 + 1) * d + 2 * d + 12 * layer + (d * d + d) + (2 * d + 2)
    check(set(body.values()) == {want_body}, "the same encoder body under every row: %r, want %d" % (body, want_body))

    notes = " ".join(l for l in out.splitlines() if l.startswith("# note:"))
    for s in ["regular token", "50265", "50260", "1038", "768.0K", "786.4K", "796416", "196608", "98304"]:
        check(s in notes, "notes explain %r" % s)

    # text and markdown carry the same figures
    rc, text, err = run("--embeddings")
    check(rc == 0 and "Table 2.2" in text and "797.2K" in text and "99.1K" in text and "38.6M" in text
          and "the paper prints PoEP 1.0" in text, "text output")
    widths = {len(l) for l in text.splitlines() if l.startswith("|")}
    check(len(widths) == 1, "text table aligned")
    rc, md, err = run("--embeddings", "--format", "markdown")
    check(rc == 0 and md.startswith("### Table 2.2") and "|:--" in md, "markdown output")
    rc, same, err = run("--table", "2.2", "--format", "csv")
    check(rc == 0 and same == out, "--table 2.2 is --embeddings")
    rc, alltables, err = run("--format", "csv")
    check(rc == 0 and "Table 2.2" not in alltables, "`all` stays the MHE paper's tables")

    d_ = tmpdir("mhe_hash_params_")
    rc, o, err = run("--embeddings", "--out-dir", os.path.join(d_, "o"))
    files = sorted(os.listdir(os.path.join(d_, "o"))) if os.path.isdir(os.path.join(d_, "o")) else []
    check(rc == 0 and files == ["hashformers_table2_2.csv"], "--out-dir: %r %s" % (files, err))

    for args in (["--embeddings", "--table", "1"], ["--embeddings", "--d", "32"], ["--embeddings", "--kv-groups", "3"]):
        rc, o, err = run(*args)
        check(rc == 2 and o == "" and err.startswith("mhe: ") and "--embeddings" in err, "%s: rc %d %r" % (args, rc, err))
    rc, o, err = run("--embeddings=1")
    check(rc == 2 and o == "" and err.startswith("mhe: "), "--embeddings takes no value: rc %d %r" % (rc, err))

    return finish()


if __name__ == "__main__":
    sys.exit(main())
