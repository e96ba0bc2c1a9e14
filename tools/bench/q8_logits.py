"""How far q8 moves a model's logits from float32: `mhe logits` of the float
checkpoint and of its q8 export over the same windows, the largest absolute
difference and the mean KL(float32 || q8) of the next-token distributions.

    python3 tools/bench/q8_logits.py FLOAT.safetensors Q8.safetensors [--text FILE | --random N] [--windows K] [--len T]

--text: consecutive windows of T bytes of a held-out text (a byte-level
model's ids are its bytes); --random: K windows of T ids drawn with seed 0
below N (a model without a tokenizer, such as the random GPT-2). Needs only
numpy besides build/mhe."""
import subprocess, sys
import numpy as np

def logits(model, ids):
    out = subprocess.run(["build/mhe", "logits", "--model", model, "--ids", " ".join(map(str, ids))],
                         check=True, capture_output=True, text=True).stdout
    return np.array([[float(x) for x in line.split()] for line in out.splitlines()], dtype=np.float64)

def main():
    a = sys.argv[1:]
    f32, q8 = a[0], a[1]
    opt = lambda k, d: a[a.index(k) + 1] if k in a else d
    K, T = int(opt("--windows", 8)), int(opt("--len", 64))
    if "--text" in a:
        data = open(opt("--text", None), "rb").read()
        wins = [list(data[i * T:(i + 1) * T]) for i in range(K)]
    else:
        rng = np.random.default_rng(0)
        wins = [rng.integers(0, int(opt("--random", 256)), T).tolist() for _ in range(K)]
    mx, kl, n = 0.0, 0.0, 0
    for w in wins:
        x, y = logits(f32, w), logits(q8, w)
        mx = max(mx, float(np.abs(x - y).max()))
        lp = x - x.max(1, keepdims=True); lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        lq = y - y.max(1, keepdims=True); lq -= np.log(np.exp(lq).sum(1, keepdims=True))
        kl += float((np.exp(lp) * (lp - lq)).sum()); n += len(w)
    span = float(np.abs(logits(f32, wins[0])).max())
    print("q8 vs float32 logits over %d positions: max |diff| %.4g (logits up to %.3g), mean KL %.3g nats" % (n, mx, span, kl / n))

if __name__ == "__main__":
    main()
