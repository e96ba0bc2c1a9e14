"""A GPT-2 of the real size (124M) with random weights, saved as transformers
does, for the real-size benchmarks (bench_decode --model, bench_llama.sh).

    python tools/bench/make_gpt2.py OUT_DIR [--seed 0]

Needs torch and transformers. Writes OUT_DIR/config.json, model.safetensors
and a byte-level BPE tokenizer.json (GPT-2's pre-tokenizer, a vocabulary of
50257 learnt from a short text: random weights need no real merges, only a
tokenizer mhe import and llama.cpp both accept). The config's `dtype` key of
transformers >= 4.56 is removed: mhe import of this tree refused it."""
import json, os, sys

def main():
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config()   # 12 layers, d_model 768, 12 heads, n_positions 1024, vocab 50257
    model = GPT2LMHeadModel(cfg).eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    p = os.path.join(out, "config.json")
    c = json.load(open(p))
    c.pop("dtype", None)
    json.dump(c, open(p, "w"), indent=2)

if __name__ == "__main__":
    main()
