#!/usr/bin/env python3
"""The PyTorch side of bench_cuda's decoding row (tools/bench/bench_torch_cuda.py
decode_loop), run on the CPU: greedy decoding with a KV cache from the twin's weights
gives the logits of the twin's full forward pass over the same tokens, for mha, mhe-mul
and mhe-add (the MHE kinds cache one head and apply the head maps to it), and each new
token is the full pass's argmax one position earlier, so the benchmark times a correct
loop. Skips when PyTorch is missing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish, mhe_missing, skip, tmpdir, torch_missing  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402


def main():
    why = torch_missing() or mhe_missing()
    if why:
        return skip("test_bench_decode", why)
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import bench_torch_cuda
    import mhe_torch
    d = tmpdir("mhe_bench_decode_")
    prompt = [(7 * i + 3) % 256 for i in range(9)]
    for kind in ("mha", "mhe-mul", "mhe-add"):
        path = os.path.join(d, kind + ".safetensors")
        rc, out, err = run("init", "--out", path, "--d_model", 32, "--n_heads", 4, "--n_layers", 2,
                           "--max_seq_len", 24, "--attn", kind, "--seed", 5)
        if not check(rc == 0, "%s: mhe init rc %d: %s" % (kind, rc, err)):
            continue
        model, _, _ = mhe_torch.load_checkpoint(path)
        model.eval()
        us, toks, last = bench_torch_cuda.decode_loop(torch, model, len(prompt), 12, prompt, device="cpu")
        with torch.no_grad():
            full = model.logits(torch.tensor([prompt + toks]))[0]
        gap = float((full[-1] - last).abs().max() / full[-1].abs().max())
        check(gap < 1e-5, "%s: the cached loop's last logits within %.1e of the full forward pass" % (kind, gap))
        want = [int(full[len(prompt) - 1 + i].argmax()) for i in range(len(toks))]
        check(toks == want, "%s: the %d greedy tokens are the full pass's argmaxes: %s vs %s" % (kind, len(toks),
                                                                                               toks, want))
        check(us > 0, "%s: a time per token (%.0f us on the CPU)" % (kind, us))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
