"""A Hugging Face GPT-2 directory (tools/bench/make_gpt2.py) as GGUF for
llama.cpp, F32 or Q8_0, with the `gguf` package (llama.cpp's gguf-py).

    python tools/bench/gguf_gpt2.py HF_DIR OUT.gguf [--q8_0]

Written here rather than by convert_hf_to_gguf.py: that script identifies a
tokenizer by hashing the pretrained one, which cannot be fetched offline,
and a random model needs none. The vocabulary is placeholder strings (the
256 byte tokens, then "<tN>") with one merge, enough for llama.cpp to load
the model; the benchmark feeds token ids. Tensors as llama.cpp's gpt2
architecture names them; Conv1D weights transposed to [out, in]. --q8_0:
every 2-D weight but the position table in Q8_0 (blocks of 32, an fp16
scale each), as mhe's q8 keeps its position table float32 too."""
import sys
import numpy as np
import gguf
from safetensors import safe_open
import json, os

def main():
    src, out = sys.argv[1], sys.argv[2]
    q8 = "--q8_0" in sys.argv
    cfg = json.load(open(os.path.join(src, "config.json")))
    f = safe_open(os.path.join(src, "model.safetensors"), "np")
    w = gguf.GGUFWriter(out, "gpt2")
    w.add_context_length(cfg["n_positions"])
    w.add_embedding_length(cfg["n_embd"])
    w.add_feed_forward_length(cfg.get("n_inner") or 4 * cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_head_count(cfg["n_head"])
    w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.ALL_F32)
    V = cfg["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    toks = ["<b%d>" % i for i in range(256)] + ["<t%d>" % i for i in range(256, V)]
    w.add_token_list(toks)
    w.add_token_types([gguf.TokenType.NORMAL] * V)
    w.add_token_merges(["<b0> <b1>"])
    w.add_bos_token_id(cfg.get("bos_token_id", V - 1))
    w.add_eos_token_id(cfg.get("eos_token_id", V - 1))

    def put(name, x, quant):
        x = np.ascontiguousarray(x.astype(np.float32))
        if quant and q8 and x.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, x)

    t = lambda k: f.get_tensor("transformer." + k)
    put("token_embd.weight", t("wte.weight"), True)
    put("position_embd.weight", t("wpe.weight"), False)
    for l in range(cfg["n_layer"]):
        p, b = "transformer.h.%d." % l, "blk.%d." % l
        g = lambda k: f.get_tensor(p + k)
        put(b + "attn_norm.weight", g("ln_1.weight"), False); put(b + "attn_norm.bias", g("ln_1.bias"), False)
        put(b + "attn_qkv.weight", g("attn.c_attn.weight").T, True); put(b + "attn_qkv.bias", g("attn.c_attn.bias"), False)
        put(b + "attn_output.weight", g("attn.c_proj.weight").T, True); put(b + "attn_output.bias", g("attn.c_proj.bias"), False)
        put(b + "ffn_norm.weight", g("ln_2.weight"), False); put(b + "ffn_norm.bias", g("ln_2.bias"), False)
        put(b + "ffn_up.weight", g("mlp.c_fc.weight").T, True); put(b + "ffn_up.bias", g("mlp.c_fc.bias"), False)
        put(b + "ffn_down.weight", g("mlp.c_proj.weight").T, True); put(b + "ffn_down.bias", g("mlp.c_proj.bias"), False)
    put("output_norm.weight", t("ln_f.weight"), False); put("output_norm.bias", t("ln_f.bias"), False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

if __name__ == "__main__":
    main()
