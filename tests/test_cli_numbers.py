"""Numbers on the mhe tool's command line (docs/reliability.md, Numbers). Every
numeric flag of every subcommand goes through one parser: the whole text in
base 10, inside the flag's range, a float finite. The flags and their ranges
are read from each command's --help (the table the parser uses), so a new flag
is tested as soon as it exists. A text that is not a number is a usage error
(exit 2), a number outside the range exit 1; both name the flag and the text,
and nothing is written. Train and model fields (mhe.h's field parser), config
files and mhe params follow the same rules. Needs only python3 and build/mhe."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import TINY, expect, run, setup  # noqa: E402

COMMANDS = ["init", "train", "eval", "generate", "grad", "export", "reparam", "hash"]
# under an emulator (MHE_TEST_RUNNER, e.g. qemu) each run costs ~100x: fewer texts per flag
QUICK = bool(os.environ.get("MHE_TEST_RUNNER"))
NOT_NUMBERS = ["abc", "5x"] if QUICK else ["abc", "", "5x", " 5", "0x10"]


def numeric_flags(cmd):
    """[(flag, kind, lo, hi)] from `mhe CMD --help`: kind int, float or u64."""
    code, out, err = run(cmd, "--help")
    flags = []
    for m in re.finditer(r"^  (--[\w-]+) \S+ .*?\((an integer|a number) in \[([-\d.e+]+), ([-\d.e+]+)\]\)", out, re.M):
        flags.append((m.group(1), "int" if m.group(2) == "an integer" else "float", float(m.group(3)), float(m.group(4))))
    for m in re.finditer(r"^  (--[\w-]+) \S+ .*?\(an unsigned 64-bit integer\)", out, re.M):
        flags.append((m.group(1), "u64", 0.0, 2.0 ** 64 - 1))
    return flags


def fields(cmd, header):
    """[(key, default)] of the numeric fields a command lists under header in --help."""
    code, out, err = run(cmd, "--help")
    part = out.split(header, 1)[1] if header in out else ""
    got = []
    for m in re.finditer(r"^    --(\w+)\s+\(default ([^)]*)\)", part, re.M):
        if re.fullmatch(r"-?[\d.e+-]+", m.group(2)):
            got.append((m.group(1), m.group(2)))
    return got


def flags_of_every_command(d, text, model):
    out_path = os.path.join(d, "never.safetensors")
    total = 0
    for cmd in COMMANDS:
        flags = numeric_flags(cmd)
        total += len(flags)
        for flag, kind, lo, hi in flags:
            base = [cmd, "--out", out_path] if cmd in ("init", "train", "grad", "export", "reparam") else [cmd]
            keep, absent = [text, model], [out_path]
            for bad in NOT_NUMBERS + (["nan", "1.5"] if kind != "float" else []) + (["-1"] if kind == "u64" else []):
                expect(base + [flag, bad], 2, [flag, "'%s'" % bad], "%s %s %r" % (cmd, flag, bad), keep=keep, absent=absent)
            if kind == "float":
                for bad in ("nan", "-inf", "1e999"):
                    expect(base + [flag, bad], 2 if bad[-3:] in ("nan", "inf") and bad[0] != "-" else 1, [flag, bad],
                           "%s %s %s" % (cmd, flag, bad), keep=keep, absent=absent)
            if kind == "u64":
                expect(base + [flag, "18446744073709551616"], 1, [flag, "out of range"], "%s %s 2^64" % (cmd, flag), keep=keep, absent=absent)
                continue
            below = "%d" % (lo - 1) if kind == "int" else repr(lo - 0.5)
            above = "%d" % (hi + 1) if kind == "int" else repr(hi * 2 + 1)
            for bad in (below, above, "99999999999999999999999"):
                expect(base + [flag, bad], 1, [flag, bad, "out of range"], "%s %s %s" % (cmd, flag, bad), keep=keep, absent=absent)
            # the last word: a flag without its value names the flag
            expect(base + [flag], 2, [flag, "needs a value"], "%s %s without a value" % (cmd, flag), keep=keep, absent=absent)
    check(total >= 14, "the help texts list the numeric flags (%d found)" % total)


def accepted(d, text, model):
    """The parser is not simply refusing: in-range values in every accepted form work."""
    for args, what in ((["generate", "--model", model, "--prompt", "ab", "--n", "+3", "--top-k", 0, "--temperature", "0"], "--n +3, --top-k 0, greedy"),
                       (["generate", "--model", model, "--prompt", "ab", "--n", 3, "--temperature", ".5", "--top-k", "007"], "--temperature .5"),
                       (["generate", "--model", model, "--prompt", "ab", "--n", 2, "--temperature", "1e-3", "--seed", "18446744073709551615"], "seed 2^64-1"),
                       (["eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2, "--batches", 0, "--threads", 1], "--batches 0 (all)"),
                       (["export", "--model", model, "--out", os.path.join(d, "ok.h"), "--max_len", 16], "export --max_len = max_seq_len")):
        code, out, err = run(*args)
        check(code == 0 and err.count("mhe:") == 0, "%s accepted: rc %d %s" % (what, code, err.strip()[-200:]))


def field_values(d, text, model):
    """Train fields (train) and model fields (init): not a number or not finite is exit 1, naming the field."""
    out_path = os.path.join(d, "never.safetensors")
    keep, absent = [text, model], [out_path]
    tfields = fields("train", "Train fields")
    mfields = fields("init", "Model fields")
    check(len(tfields) >= 15 and len(mfields) >= 15, "numeric train and model fields listed: %d, %d" % (len(tfields), len(mfields)))
    if QUICK:
        tfields, mfields = tfields[::4], mfields[::8]
    for key, default in tfields:
        for bad in ("abc", "nan", "1e999"):
            expect(["train", "--data", text, "--out", out_path, "--" + key, bad], 1, ["--" + key, key],
                   "train --%s %r" % (key, bad), keep=keep, absent=absent)
    for key, default in mfields:
        for bad in ("abc", "nan"):
            expect(["init", "--out", out_path, "--" + key, bad], 1, ["--" + key, key], "init --%s %r" % (key, bad), keep=keep, absent=absent)
    # the same parser reads config files: the line and the key are named
    cfg = os.path.join(d, "n.cfg")
    for body, words in (("d_model=16\nn_heads=two\n", ["line 2", "n_heads", "two"]), ("dropout = nan\n", ["line 1", "dropout", "nan"]),
                        ("d_model=1e999\n", ["line 1", "d_model"]), ("init_std=inf\n", ["line 1", "init_std"])):
        with open(cfg, "w") as f:
            f.write(body)
        expect(["init", "--config", cfg, "--out", out_path], 1, words, "config %r" % body, keep=keep + [cfg], absent=absent)


def params_numbers(d):
    out_dir = os.path.join(d, "params_out")
    for args, rc, words in ((["--n", ""], 2, ["--n", "''"]), (["--d", "64x"], 2, ["--d", "64x"]), (["--B", "1e3", "--complexity"], 2, ["--B", "1e3"]),
                            (["--kv-groups", "99999999999999999999999"], 2, ["--kv-groups"]), (["--n", "0"], 1, ["--n"]),
                            (["--L", "-5", "--complexity"], 1, ["--L"])):
        expect(["params"] + args + ["--out-dir", out_dir], rc, words, "params %s" % args, absent=[out_dir])


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_numbers.py", why)
    d = tmpdir("mhe_cli_numbers_")
    text, model, ckpt = setup(d)
    flags_of_every_command(d, text, model)
    accepted(d, text, model)
    field_values(d, text, model)
    params_numbers(d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
