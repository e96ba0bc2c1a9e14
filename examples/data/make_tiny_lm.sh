#!/bin/sh
# Trains examples/data/tiny_lm.safetensors, the model examples/embedded.c
# compiles in: a 2-layer MHE-MUL byte LM (d_model 64, 4 heads, d_ff 192,
# 64-token context) on the bundled corpus, 1500 steps, seed 1, then keeps the
# weights only (`mhe export`). Run from the repository root after `make`.
set -e
tmp=$(mktemp -d)
build/mhe train --data examples/data/train.txt --valid examples/data/valid.txt --out "$tmp/ck.safetensors" \
    --d_model 64 --n_heads 4 --n_layers 2 --d_ff 192 --max_seq_len 64 --attn mhe-mul \
    --seq_len 64 --batch 16 --steps 1500 --lr 3e-3 --min_lr 3e-4 --warmup 100 --eval_every 500 --log_every 500 --seed 1
build/mhe export --model "$tmp/ck.safetensors" --out examples/data/tiny_lm.safetensors
rm -rf "$tmp"
