"""What the mhe tool's flags mean (docs/cli.md). generate --n N writes
exactly N new tokens; each subcommand's --help and the flags it accepts come
from one table (every listed flag is accepted, every other refused by name);
model flags are refused where a loaded model brings its own config; a key or
flag given twice is refused; NUL bytes in token and config files are refused
with the offset; export --name must make valid C; resuming says clearly why it
cannot go on (a weights-only file, a run already at --steps). Each case checks
the exit status, the message, and that no input or earlier output changed.
Needs only python3 and build/mhe (and a C compiler for the export check)."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, check, finish, mhe_missing, run_mhe, skip, tmpdir  # noqa: E402
from clikit import STEPS, TINY, expect, run, setup  # noqa: E402

COMMANDS = ["init", "train", "eval", "generate", "grad", "export", "reparam", "hash"]


def generate_n(model):
    """--n N: the prompt, exactly N bytes, a newline (bytes, not text: samples need not be UTF-8)."""
    for n in (0, 1, 7, 15):
        p = subprocess.run([MHE, "generate", "--model", model, "--prompt", "ab", "--n", str(n), "--seed", "5"], capture_output=True, timeout=60)
        check(p.returncode == 0 and p.stdout.startswith(b"ab") and len(p.stdout) == 2 + n + 1 and p.stdout.endswith(b"\n"),
              "generate --n %d writes exactly %d tokens: %r" % (n, n, p.stdout))
    # without --n: 200, or what fits the model's window (max_seq_len 16: 15 after a 2-byte prompt)
    p = subprocess.run([MHE, "generate", "--model", model, "--prompt", "ab"], capture_output=True, timeout=60)
    check(p.returncode == 0 and len(p.stdout) == 2 + 15 + 1, "generate without --n fills the window: %d bytes" % len(p.stdout))
    expect(["generate", "--model", model, "--prompt", "ab", "--n", 16], 1, ["--n 16", "room for 15", "max_seq_len 16"],
           "generate --n past the window", keep=[model])


def value_for(flag_line):
    """A value the parser takes for a flag, from its --help line."""
    m = re.search(r"\((?:an integer|a number) in \[([-\d.e+]+),", flag_line)
    if m:
        return "%g" % float(m.group(1))
    if "(an unsigned 64-bit integer)" in flag_line:
        return "7"
    m = re.match(r"\s*--[\w-]+ (\S+)", flag_line)
    if not m:
        return None                       # a switch
    arg = m.group(1)
    return arg.split("|")[0] if "|" in arg and "." not in arg else "x"


def help_and_flags(d):
    """Every flag a command's --help lists is accepted; the usage line lists the same flags.
    Runs in d: `init --out x` alone is a complete command."""
    for cmd in COMMANDS:
        code, out, err = run(cmd, "--help")
        flags = re.findall(r"^  (--[\w-]+)(.*)$", out, re.M)
        check(code == 0 and out.startswith("usage: mhe " + cmd) and len(flags) >= 1, "%s --help lists its flags" % cmd)
        for flag, rest in flags:
            check(re.search(r"\[?%s[ \]]" % re.escape(flag), out.split("Flags:")[0]) is not None, "%s: %s in the usage line" % (cmd, flag))
            v = value_for(flag + rest)
            args = [cmd, flag] + ([v] if v is not None else [])
            code, o, e = run_mhe(*args, cwd=d)
            check(not any(w in e for w in ("unknown option", "is not a flag of", "does not use", "is a model field", "needs an", "needs a number")),
                  "%s accepts %s %s: %s" % (cmd, flag, v, e.strip()[-200:]))
    # the example: export --max_len is in the help and accepted
    code, out, err = run("export", "--help")
    check("--max_len N" in out, "export --help lists --max_len")
    # a flag of another command is refused by name, as is a made-up one
    expect(["generate", "--dim", 8], 2, ["--dim", "not a flag of mhe generate"], "generate --dim")
    expect(["eval", "--prompt", "x"], 2, ["--prompt", "not a flag of mhe eval"], "eval --prompt")
    expect(["init", "--steps", 5], 2, ["--steps", "mhe init does not use"], "init --steps")
    expect(["eval", "--steps", 5], 2, ["--steps", "mhe eval does not use"], "eval --steps")
    expect(["generate", "--colour", "red"], 2, ["unknown option --colour"], "a made-up flag")
    expect(["eval", "stray"], 2, ["unexpected argument 'stray'"], "a stray argument")


def model_flags(d, text, model, ckpt):
    out = os.path.join(d, "mf.safetensors")
    keep, absent = [text, model, ckpt], [out]
    expect(["train", "--data", text, "--model", model, "--out", out, "--d_model", 64] + STEPS, 2, ["--d_model", "--model", "refused"],
           "train --model with a model flag", keep=keep, absent=absent)
    expect(["train", "--data", text, "--resume", ckpt, "--out", out, "--attn", "mhe-mul"] + STEPS, 2, ["--attn", "--resume", "refused"],
           "train --resume with a model flag", keep=keep, absent=absent)
    cfg = os.path.join(d, "m.cfg")
    with open(cfg, "w") as f:
        f.write("d_model=16\nn_heads=2\n")
    expect(["train", "--data", text, "--model", model, "--config", cfg, "--out", out] + STEPS, 2, ["--config", "refused"],
           "train --model with --config", keep=keep + [cfg], absent=absent)
    expect(["train", "--data", text, "--model", model, "--words", 1, "--out", out] + STEPS, 2, ["--words", "--model", "refused"],
           "train --model with --words", keep=keep, absent=absent)
    expect(["train", "--data", text, "--model", model, "--resume", ckpt, "--out", out] + STEPS, 2, ["--model or --resume"],
           "train --model and --resume", keep=keep, absent=absent)
    for cmd in (["eval", "--model", model, "--data", text], ["generate", "--model", model], ["export", "--model", model, "--out", out]):
        expect(cmd + ["--n_layers", 2], 2, ["--n_layers", "model field"], "%s with a model flag" % cmd[0], keep=keep, absent=absent)
    # where it applies (a new model), a flag overrides the config file
    code, o, e = run("init", "--config", cfg, "--d_model", 32, "--max_seq_len", 16, "--n_layers", 1, "--out", out)
    code2, o2, e2 = run("inspect", out)
    check(code == 0 and re.search(r"meta d_model +=  ?32\n", o2) and re.search(r"meta n_heads +=  ?2\n", o2), "a flag overrides --config: %s" % e)
    os.remove(out)


def duplicates(d, text, model):
    out = os.path.join(d, "dup.safetensors")
    cfg = os.path.join(d, "dup.cfg")
    with open(cfg, "w") as f:
        f.write("d_model = 16\nn_heads=2\n# again, with a comment\n  d_model=32  # the last one used to win\n")
    expect(["init", "--config", cfg, "--out", out], 1, ["line 4", "d_model", "already set on line 1"], "a config key twice",
           keep=[cfg], absent=[out])
    expect(["train", "--data", text, "--out", out, "--steps", 2, "--steps", 3], 2, ["--steps given twice"], "a train flag twice",
           keep=[text], absent=[out])
    expect(["init", "--d_model", 16, "--d_model", 32, "--out", out], 2, ["--d_model given twice"], "a model flag twice", absent=[out])
    expect(["generate", "--model", model, "--n", 3, "--n", 4], 2, ["--n given twice"], "a tool flag twice", keep=[model])
    expect(["export", "--model", model, "--out", out + ".h", "--max_len", 8, "--n", 8], 2, ["--n is --max_len"], "export --n and --max_len",
           keep=[model], absent=[out + ".h"])


def nul_bytes(d, model):
    tok = os.path.join(d, "nul_tok.txt")
    out = os.path.join(d, "g.safetensors")
    with open(tok, "wb") as f:
        f.write(b"1 2 3\n4 5\x006\n")
    expect(["grad", "--model", model, "--tokens", tok, "--out", out], 1, [tok, "NUL byte at offset 9"], "grad --tokens with a NUL byte",
           keep=[tok, model], absent=[out])
    cfg = os.path.join(d, "nul.cfg")
    with open(cfg, "wb") as f:
        f.write(b"d_model=16\nn_heads=2\0\n")
    expect(["init", "--config", cfg, "--out", out], 1, ["line 2", "NUL"], "a config file with a NUL byte", keep=[cfg], absent=[out])


def export_names(d, model):
    out = os.path.join(d, "names.h")
    for name in ("", "int", "1abc", "a-b", "__x", "_Bool", "static", "a b"):
        expect(["export", "--model", model, "--out", out, "--name", name], 1, ["--name", "not a C identifier"], "export --name %r" % name,
               keep=[model], absent=[out])
    code, o, e = run("export", "--model", model, "--out", out, "--name", "tiny_lm2", "--max_len", 8)
    check(code == 0 and "tiny_lm2_ARENA_BYTES" in open(out).read(), "export --name tiny_lm2: %s" % e)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("  (no C compiler: the header is not compiled)")
        return
    main_c = os.path.join(d, "use_header.c")
    with open(main_c, "w") as f:
        f.write('#include "names.h"\nint main(void) { return tiny_lm2_SIZE == sizeof tiny_lm2 && tiny_lm2_MAX_LEN == 8 ? 0 : 1; }\n')
    p = subprocess.run([cc, "-std=c99", "-Wall", "-Werror", "-pedantic", "-o", os.path.join(d, "use_header"), main_c], capture_output=True, text=True)
    check(p.returncode == 0, "the exported header compiles as C99: %s" % p.stderr[-300:])


def resume_messages(d, text, model, ckpt):
    out = os.path.join(d, "r.safetensors")
    # ckpt is at step 2 (clikit.STEPS)
    o, e = expect(["train", "--data", text, "--resume", ckpt, "--out", ckpt, "--steps", 2], 1, ["at step 2", "steps is 2", "nothing to train"],
                  "resume at step >= steps", keep=[ckpt, text])
    check("final train loss" not in o, "no zero 'final train loss' line: %r" % o[-100:])
    expect(["train", "--data", text, "--resume", ckpt, "--out", ckpt, "--steps", 1], 1, ["at step 2", "nothing to train"], "resume past steps",
           keep=[ckpt, text])
    weights = os.path.join(d, "weights_only.safetensors")
    code, o, e = run("export", "--model", ckpt, "--out", weights)
    check(code == 0, "export weights: %s" % e)
    expect(["train", "--data", text, "--resume", weights, "--out", out] + STEPS, 1, ["weights-only", "--model " + weights],
           "resume a weights-only file", keep=[weights, text], absent=[out])
    code, o, e = run("train", "--data", text, "--model", weights, "--out", out, *STEPS)
    check(code == 0 and os.path.exists(out), "the weights-only file trains with --model: %s" % e)


def missing_values(model):
    expect(["hash", "--model"], 2, ["--model", "needs a value"], "hash --model without a value")
    expect(["hash", "the"], 1, ["--model", "required"], "hash without --model")
    expect(["generate", "--model", model, "--prompt"], 2, ["--prompt", "needs a value"], "generate --prompt without a value", keep=[model])
    expect(["export", "--model", model], 1, ["--out", "required"], "export without --out", keep=[model])


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_semantics.py", why)
    d = tmpdir("mhe_cli_semantics_")
    text, model, ckpt = setup(d)
    generate_n(model)
    help_and_flags(d)
    model_flags(d, text, model, ckpt)
    duplicates(d, text, model)
    nul_bytes(d, model)
    export_names(d, model)
    resume_messages(d, text, model, ckpt)
    missing_values(model)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
