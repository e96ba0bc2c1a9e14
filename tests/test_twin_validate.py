"""The PyTorch twin (tools/python/mhe_torch.py) validates model and train configs as mhe does
(issue 28, item 6). Hundreds of generated configs, near the edges of every range and of
the rules between fields: the twin's validate_config / validate_train refuses exactly
the ones `mhe init` / `mhe train` refuse. Then `mhe_torch.py train` itself: a config mhe
refuses (n_heads=3 with d_model 32, lr=nan, ...) stops before step 1 with one line on
stderr (no traceback) and no checkpoint. Needs build/mhe, PyTorch and numpy."""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish, mhe_missing, skip, tmpdir, torch_missing  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402

BASE = {"d_model": "16", "n_heads": "2", "n_layers": "1", "max_seq_len": "16", "vocab_size": "64"}
# values around each field's limits and the rules between fields (mhe.h's tables and mhe_config_validate)
MODEL_VALUES = {
    "d_model": ["0", "1", "12", "16", "30", "32", "65536", "65537", "-4", "1.5", "16x"],
    "n_heads": ["0", "1", "2", "3", "4", "5", "16", "4097"],
    "d_head": ["0", "1", "8", "256", "257", "-1"],
    "n_layers": ["0", "1", "2", "64", "65"],
    "kv_groups": ["0", "1", "2", "3"],
    "vocab_size": ["0", "1", "8", "64", "16777217"],
    "max_seq_len": ["0", "1", "16"],
    "arch": ["decoder", "encoder", "encdec", "decoderx", ""],
    "enc_layers": ["0", "1", "2", "63", "64"],
    "mask_token": ["-2", "-1", "0", "63", "64"],
    "admin": ["0", "1", "2"],
    "norm_position": ["pre", "post", "mid"],
    "n_classes": ["0", "2", "-1"],
    "dropout": ["0", "0.5", "0.99", "0.995", "1", "nan", "-0.1", "inf"],
    "norm_eps": ["1e-12", "1e-13", "1", "1.5", "0"],
    "init_std": ["1e-6", "1e-7", "10", "11", "nan"],
    "head_init_std": ["-1", "-1.5", "10"],
    "attn": ["mha", "gqa", "el-att", "mqa,mha", "mha@even", "foo", "mhe-add"],
    "norm": ["layernorm", "rmsnorm", "batchnorm"],
    "activation": ["gelu", "relu", "tanh"],
    "bias": ["0", "1", "2"],
    "d_ff": ["0", "1", "1048576", "1048577"],
}
TRAIN_VALUES = {
    "lr": ["0", "0.001", "100", "100.5", "nan", "inf", "-1e-3", "1e-3x"],
    "steps": ["0", "1", "-1", "2147483647", "2147483648", "1.0"],
    "batch": ["0", "1", "1048576", "1048577"],
    "seq_len": ["0", "1", "1_0", "1048577"],
    "beta1": ["0", "0.9", "0.999999", "1"],
    "beta2": ["0.95", "1", "nan"],
    "eps": ["1e-30", "0", "1", "2"],
    "clip": ["0", "1e30", "1e31", "-1"],
    "schedule": ["cosine", "linear", "constant", "invsqrt", "cosine-restarts", "step"],
    "cycles": ["0", "1", "1000000", "1000001"],
    "mlm_prob": ["0.001", "0.0001", "1", "1.1"],
    "sr_prob": ["0", "1", "1.01"],
    "seed": ["0", "18446744073709551615", "18446744073709551616", "-1"],
    "eval_batches": ["0", "1", "1000001"],
    "log_every": ["0", "1"],
}


def twin():
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch
    return mhe_torch


def model_configs(rng, n):
    keys = sorted(MODEL_VALUES)
    out = [{}]
    for k in keys:                       # every value of every field once, on the base
        out += [{k: v} for v in MODEL_VALUES[k]]
    while len(out) < n:                  # then pairs and triples: the rules between fields
        out.append({k: rng.choice(MODEL_VALUES[k]) for k in rng.sample(keys, rng.choice((2, 3)))})
    return out


def mhe_model_refuses(d, cfg):
    args = ["init", "--out", os.path.join(d, "m.safetensors")]
    for k, v in cfg.items():
        args += ["--" + k, v]
    code, out, err = run(*args)
    check(code in (0, 1, 2) and (code == 0 or err.startswith("mhe: ")), "mhe init %s: rc %d, %r" % (cfg, code, err[-200:]))
    return code != 0, err.strip()


def mhe_train_refuses(d, key, value):
    """refused by mhe_train_config_set: `mhe train` stops at the field, before reading the data"""
    code, out, err = run("train", "--data", os.path.join(d, "absent.txt"), "--out", os.path.join(d, "t.safetensors"), "--" + key, value)
    check(code in (1, 2), "mhe train --%s %s fails somewhere (no data): rc %d" % (key, value, code))
    return err.startswith("mhe: --%s" % key), err.strip()


def same_verdicts(T, d):
    rng = random.Random(28)
    n_model = n_train = 0
    for cfg in model_configs(rng, 400):
        full = dict(BASE, **cfg)
        mhe_no, why = mhe_model_refuses(d, full)
        try:
            T.validate_config(full)
            twin_no, twin_why = False, ""
        except ValueError as e:
            twin_no, twin_why = True, str(e)
        check(mhe_no == twin_no, "config %s: mhe %s (%s), the twin %s (%s)" % (
            cfg, "refuses" if mhe_no else "accepts", why[-160:], "refuses" if twin_no else "accepts", twin_why))
        check("\n" not in twin_why, "one line per refusal: %r" % twin_why)
        n_model += 1
    for k, values in sorted(TRAIN_VALUES.items()):
        for v in values:
            mhe_no, why = mhe_train_refuses(d, k, v)
            try:
                T.validate_train({k: v})
                twin_no, twin_why = False, ""
            except ValueError as e:
                twin_no, twin_why = True, str(e)
            check(mhe_no == twin_no, "train %s=%s: mhe %s (%s), the twin %s (%s)" % (
                k, v, "refuses" if mhe_no else "accepts", why[-160:], "refuses" if twin_no else "accepts", twin_why))
            n_train += 1
    check(n_model >= 400 and n_train >= 60, "compared %d model configs and %d train values" % (n_model, n_train))


def train_refuses(d):
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("In the beginning God created the heaven and the earth. " * 20)
    out = os.path.join(d, "twin.safetensors")
    script = os.path.join(REPO, "tools", "python", "mhe_torch.py")
    cases = [(["--set", "d_model=32", "--set", "n_heads=3"], "n_heads 3"),
             (["--set", "lr=nan"], "'lr'"), (["--set", "lr=inf"], "'lr'"), (["--set", "beta2=1"], "'beta2'"),
             (["--set", "dropout=1"], "'dropout'"), (["--set", "arch=encdec"], "enc_layers"),
             (["--set", "n_layers=0"], "'n_layers'"), (["--set", "seq_len=0"], "'seq_len'"),
             (["--set", "admin=1"], "norm_position=post"), (["--set", "mask_token=300"], "mask_token 300"),
             (["--set", "attn=gqa", "--set", "kv_groups=3"], "kv_groups 3"), (["--set", "schedule=step"], "'schedule'")]
    for extra, word in cases:
        if os.path.exists(out):
            os.remove(out)
        p = subprocess.run([sys.executable, script, "train", "--data", text, "--out", out, "--steps", "1",
                            "--set", "d_model=16", "--set", "n_heads=2", "--set", "n_layers=1", "--set", "max_seq_len=16",
                            "--set", "seq_len=8", "--set", "batch=2"] + extra,
                           capture_output=True, text=True, timeout=300)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("mhe_torch: ") and word in lines[0],
              "twin train %s: one line naming %s, exit 1 (rc %d: %r)" % (extra, word, p.returncode, p.stderr[-300:]))
        check("step" not in p.stdout and not os.path.exists(out), "twin train %s: refused before step 1, nothing written" % extra)


def main():
    why = mhe_missing() or torch_missing()
    if why:
        return skip("test_twin_validate.py", why)
    T = twin()
    d = tmpdir("mhe_twin_validate_")
    check(T._FIELD_TABLES is not None and len(T._FIELD_TABLES["config"]) == len(T.CONFIG_DEFAULTS) and
          len(T._FIELD_TABLES["train"]) == len(T.TRAIN_DEFAULTS), "the twin reads every field of mhe.h's tables")
    same_verdicts(T, d)
    train_refuses(d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
