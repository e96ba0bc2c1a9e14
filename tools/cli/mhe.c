/* mhe - command-line front end of mhe.h: init, train, eval, generate, grad, inspect, params,
   export, hash, reparam.
   Every subcommand prints its usage with --help. Errors print one line and
   exit with status 1 (2 for a usage error). */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#ifdef MHE_CUDA /* make cuda: the tool with --device cuda */
#include "../../mhe_cuda.cuh"
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mhe_plots.h"
#include "mhe_costs.h"     /* Table 4.8 beside the measured cache (generate) */
#include "mhe_params.h"   /* cmd_params: the parameter and memory calculator */
#include "mhe_args.h"     /* the number parser of every flag */
#include "mhe_clock.h"    /* now_s, peak_rss_mb */
#include "mhe_import.h"   /* cmd_import: Hugging Face GPT-2 / BERT checkpoints */
#include "mhe_compare.h"  /* cmd_compare: the study of attention kinds */
#include <stddef.h>
#include <sys/stat.h>
#include <signal.h>
#include <errno.h>
#include <unistd.h>
#ifdef _WIN32
#include <windows.h>      /* same_file's file ids */
#include <io.h>           /* _setmode */
#include <fcntl.h>
#endif

static int die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "mhe: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

static void set_threads(int n) {
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static int read_text(const char *path, char **buf, size_t *len) {
    void *b;
    char err[MHE_ERR_LEN];
    if (mhe_read_file(path, &b, len, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    *buf = (char *)b;
    return 1;
}

/* ---- options ------------------------------------------------------------ */

/* Each subcommand has one table of the flags it takes: the parser accepts
   exactly those, and --help prints them, so the two cannot disagree. Model
   fields (mhe_config) and train fields (mhe_train_config) are flags as well
   where a command takes them; their values go through mhe.h's checked field
   parser, every other number through mhe_args.h. */

typedef struct {
    mhe_config cfg;
    mhe_train_config tc;
    int cfg_given;
    char tc_given[64];                 /* which train fields came from the command line */
    char model_given[128];             /* which model fields came from the command line */
    const char *config_path, *model, *out, *data, *valid, *tokens, *resume, *prompt, *source, *task, *indicators, *name;
    const char *device, *tf32_s, *precision_s, *words_s, *init_s, *quant_s;
    const char *tokenizer;             /* init/train --tokenizer: a new model's BPE tokenizer (read into tok) */
    const char *split_s, *added;       /* tokenize train --split, --added */
    mhe_bpe *tok;
    const char *dump_batches;          /* train --dump-batches FILE: every batch drawn, for a lockstep replay */
    const char *ids;                   /* generate, logits: token ids "5 17 3" in place of text */
    const char *types;                 /* logits --types: token-type ids, one per id */
    long mask_token;                   /* import --mask-token */
    int *prompt_ids;                   /* generate --ids, parsed */
    const char *in_files[3];           /* inputs that are no flag's (import's DIR/config.json ...): never an output */
    int cfg_vocab;                     /* the --config file sets vocab_size */
    const char *args[256];             /* positional arguments (mhe hash's texts) */
    const char *pretrain, *train_set, *test, *kinds, *baseline, *reference, *pairs, *pre_fields;   /* compare */
    long subwords, seeds, jobs;        /* compare */
    unsigned long long init_seed;      /* compare --init-seed */
    int n_args;
    unsigned long long seed;
    long threads, n_tokens, top_k, batches, map_len, max_len, dim, max_iter, group;
    long stride;                       /* eval --stride S: strided perplexity (0: consecutive windows) */
    int quiet, skip, words, cuda, precision, drop_nsp, special;
    double temperature, tol;
    char given[64];                    /* which flags of the command's table were given */
    const struct command_spec *cmd;
} opts;

enum { F_STR, F_SWITCH, F_INT, F_U64, F_FLOAT, F_CHOICE };

typedef struct {
    const char *name, *arg;            /* --name ARG (no ARG: a switch) */
    int type, required;
    double lo, hi;                     /* F_INT, F_FLOAT: the allowed range */
    const char *choices;               /* F_CHOICE: "a|b|c" */
    size_t off;                        /* where the value goes in opts */
    const char *help;
} flag_spec;

#define FLAG(name, arg, type, lo, hi, choices, field, help) { name, arg, type, 0, lo, hi, choices, offsetof(opts, field), help }
#define NEED(name, arg, field, help) { name, arg, F_STR, 1, 0, 0, NULL, offsetof(opts, field), help }
#define STR(name, arg, field, help) FLAG(name, arg, F_STR, 0, 0, NULL, field, help)
#define THREADS FLAG("threads", "N", F_INT, 0, 4096, NULL, threads, "OpenMP threads (0: the default)")

typedef struct command_spec {
    const char *name;
    const flag_spec *flags;
    int n_flags;
    int model_fields;                  /* 0 none, 1 every model field, 2 every one but only for a new model */
    const char *train_fields;          /* NULL none, "*" all, else the names it uses, space-separated */
    const char *positional;            /* the usage of positional arguments, or NULL */
    const char *about;
} command_spec;

static const flag_spec init_flags[] = {
    NEED("out", "MODEL.safetensors", out, "the model file to write"),
    STR("config", "CFG", config_path, "key=value lines of model fields; flags override them"),
    FLAG("seed", "S", F_U64, 0, 0, NULL, seed, "seed of the initial weights (default 42)"),
    FLAG("words", "0|1", F_CHOICE, 0, 0, "0|1", words_s, "1: embedding=vocab gets a word vocabulary from --data"),
    STR("data", "TEXT", data, "the corpus a word model takes its vocabulary or n-gram table from"),
    STR("tokenizer", "TOK", tokenizer, "texts as BPE tokens of TOK (mhe tokenize, or a tokenizer.json); kept in the model"),
};
static const flag_spec train_flags[] = {
    NEED("data", "TRAIN.txt", data, "training text (or `label<TAB>text` lines for --task cls)"),
    NEED("out", "CKPT.safetensors", out, "the checkpoint to write (may be the --resume file)"),
    STR("valid", "VALID.txt", valid, "validation text, evaluated every eval_every steps"),
    STR("model", "M.safetensors", model, "start from these weights (no model fields then)"),
    STR("config", "CFG", config_path, "key=value lines of model fields for a new model"),
    STR("resume", "CKPT.safetensors", resume, "continue a checkpoint this command wrote"),
    FLAG("task", "lm|cls|sr", F_CHOICE, 0, 0, "lm|cls|sr", task, "what to learn (default lm)"),
    FLAG("words", "0|1", F_CHOICE, 0, 0, "0|1", words_s, "1: texts as words with a word vocabulary"),
    STR("tokenizer", "TOK", tokenizer, "a new model reads BPE tokens of TOK (mhe tokenize, or a tokenizer.json); kept in the checkpoint"),
    THREADS,
    FLAG("device", "cpu|cuda", F_CHOICE, 0, 0, "cpu|cuda", device, "where to train (cuda: build/cuda/mhe)"),
    FLAG("precision", "fp32|tf32|bf16", F_CHOICE, 0, 0, "fp32|tf32|bf16", precision_s, "the GPU's GEMMs (default fp32; tf32, bf16: tensor cores, float32 sums)"),
    FLAG("tf32", "0|1", F_CHOICE, 0, 0, "0|1", tf32_s, "1: the same as --precision tf32"),
    FLAG("quiet", NULL, F_SWITCH, 0, 0, NULL, quiet, "no progress or summary lines"),
    STR("dump-batches", "FILE", dump_batches, "record every batch drawn (--task lm), for tools/python/mhe_torch.py replay"),
};
static const flag_spec eval_flags[] = {
    NEED("model", "M.safetensors", model, "the model to evaluate"),
    NEED("data", "TEXT", data, "the text (or `label<TAB>text` lines for --task cls)"),
    FLAG("task", "lm|cls|sr", F_CHOICE, 0, 0, "lm|cls|sr", task, "what to measure (default lm)"),
    FLAG("batches", "N", F_INT, 0, 1e9, NULL, batches, "batches to evaluate (default 50; 0: all of the text)"),
    FLAG("skip", NULL, F_SWITCH, 0, 0, NULL, skip, "the attention of every layer that is not mha becomes the identity"),
    STR("indicators", "PREFIX", indicators, "write PREFIX.csv, PREFIX.svg and PREFIX_maps.svg"),
    FLAG("map-len", "N", F_INT, 1, 1e6, NULL, map_len, "bytes of the heat-maps of --indicators (default 32)"),
    FLAG("stride", "S", F_INT, 1, 1 << 24, NULL, stride, "strided perplexity: windows S apart (1..seq_len; a decoder LM)"),
    THREADS,
    FLAG("device", "cpu|cuda", F_CHOICE, 0, 0, "cpu|cuda", device, "where the forward passes run (cuda: build/cuda/mhe)"),
    FLAG("precision", "fp32|tf32|bf16", F_CHOICE, 0, 0, "fp32|tf32|bf16", precision_s, "the GPU's GEMMs (default fp32; tf32, bf16: tensor cores, float32 sums)"),
    FLAG("tf32", "0|1", F_CHOICE, 0, 0, "0|1", tf32_s, "1: the same as --precision tf32"),
};
static const flag_spec generate_flags[] = {
    NEED("model", "M.safetensors", model, "a decoder or encoder-decoder with an LM head"),
    STR("prompt", "TEXT", prompt, "the start of the text (default a newline)"),
    STR("source", "TEXT", source, "the source an encoder-decoder model encodes (required there)"),
    STR("ids", "\"ID ID ...\"", ids, "the prompt as token ids; prints the prompt's and the new tokens' ids"),
    FLAG("n", "N", F_INT, 0, 1e9, NULL, n_tokens, "exactly N new tokens (default 200, or what fits the model's max_seq_len)"),
    FLAG("temperature", "T", F_FLOAT, 0, 1e6, NULL, temperature, "sampling temperature (default 0.8; 0: greedy)"),
    FLAG("top-k", "K", F_INT, 0, 1e9, NULL, top_k, "sample among the K likeliest (default 40; 0: no cut)"),
    THREADS,
    FLAG("device", "cpu|cuda", F_CHOICE, 0, 0, "cpu|cuda", device, "where the model runs (cuda: build/cuda/mhe)"),
    FLAG("precision", "fp32|tf32|bf16", F_CHOICE, 0, 0, "fp32|tf32|bf16", precision_s, "the GPU's GEMMs (default fp32; tf32, bf16: tensor cores, float32 sums)"),
    FLAG("tf32", "0|1", F_CHOICE, 0, 0, "0|1", tf32_s, "1: the same as --precision tf32"),
};
static const flag_spec grad_flags[] = {
    NEED("model", "M.safetensors", model, "the model"),
    NEED("tokens", "TOKENS.txt", tokens, "the batch, one sequence per line (see above)"),
    NEED("out", "G.safetensors", out, "the loss and gradients to write"),
    THREADS,
};
static const flag_spec export_flags[] = {
    NEED("model", "CKPT.safetensors", model, "the checkpoint"),
    NEED("out", "FILE.safetensors|FILE.h", out, "weights only, as safetensors or as a C header"),
    STR("name", "NAME", name, "the C identifier of the array in FILE.h (default mhe_model)"),
    FLAG("max_len", "N", F_INT, 1, 1e9, NULL, max_len, "tokens of the KV cache the arena holds (default: max_seq_len)"),
    FLAG("n", "N", F_INT, 1, 1e9, NULL, n_tokens, "the same as --max_len"),
    FLAG("quant", "q8", F_CHOICE, 0, 0, "q8", quant_s, "int8 weights for inference: linear layers' matrices int8, the rest float32"),
    FLAG("group", "G", F_INT, 0, 1 << 20, NULL, group, "--quant: weights per scale along a row (default 32; 0: one scale per row)"),
};
static const flag_spec reparam_flags[] = {
    NEED("model", "CKPT", model, "a trained model with mha layers"),
    NEED("out", "OUT", out, "the collab model to write"),
    { "dim", "D", F_INT, 1, 1, 1 << 20, NULL, offsetof(opts, dim), "shared query/key width D~" },
    FLAG("max_iter", "N", F_INT, 1, 1e9, NULL, max_iter, "ALS sweeps per layer before giving up (default 1000)"),
    FLAG("tol", "X", F_FLOAT, 0, 1, NULL, tol, "converged when the relative error changes by less (default 1e-06)"),
    FLAG("init", "svd|random", F_CHOICE, 0, 0, "svd|random", init_s, "svd (HOSVD start, default) or random (uniform [0,1), the authors' code)"),
    FLAG("seed", "S", F_U64, 0, 0, NULL, seed, "seed of the starting factors (default 1)"),
    THREADS,
};
static const flag_spec tokenize_flags[] = {
    STR("data", "TEXT", data, "train: the text to learn from; encode: the text; decode: whitespace-separated ids"),
    STR("out", "TOK", out, "train, convert: the tokenizer file to write (mhe's text form)"),
    FLAG("vocab", "N", F_INT, 256, MHE_BPE_MAX_TOKENS, NULL, n_tokens, "train: tokens in all (256 bytes, the merges, the added tokens)"),
    FLAG("split", "gpt2|none", F_CHOICE, 0, 0, "gpt2|none", split_s, "train: GPT-2's pre-tokenisation (default) or none"),
    STR("added", "\"T1 T2 ..\"", added, "train: added tokens, space-separated, the last ids (mask_token -1 is the last: put <mask> last)"),
    STR("tokenizer", "TOK", tokenizer, "encode, decode, convert: a tokenizer file (mhe's, or a tokenizer.json)"),
    STR("model", "M.safetensors", model, "encode, decode: the tokenizer of this model"),
    FLAG("special", NULL, F_SWITCH, 0, 0, NULL, special, "encode: the tokenizer's cls and sep ids around the text (BERT's [CLS] text [SEP])"),
    FLAG("threads", "N", F_INT, 0, 4096, NULL, threads, "encode: threads (0: OpenMP's default), the text cut at lines; the same ids"),
};
static const flag_spec import_flags[] = {
    NEED("out", "OUT.safetensors", out, "the mhe model to write (-o OUT works too)"),
    FLAG("mask-token", "ID", F_INT, 0, 1 << 24, NULL, mask_token, "the [MASK] id a BERT's masked LM trains with (default vocab_size - 1)"),
    FLAG("drop-nsp", NULL, F_SWITCH, 0, 0, NULL, drop_nsp, "a BertForPreTraining file (bert-base-uncased's): leave out its next-sentence head and pooler"),
};
static const flag_spec logits_flags[] = {
    NEED("model", "M.safetensors", model, "the model"),
    NEED("ids", "\"ID ID ...\"", ids, "one sequence of token ids"),
    STR("types", "\"T T ...\"", types, "token-type (segment) ids, one per token, of a model with type_vocab (default all 0)"),
    FLAG("task", "lm|cls", F_CHOICE, 0, 0, "lm|cls", task, "lm (default): a row of logits per token; cls: the classification head's"),
    THREADS,
};
static const flag_spec hash_flags[] = {
    NEED("model", "M.safetensors", model, "a word model"),
};

static const flag_spec compare_flags[] = {
    NEED("out", "DIR", out, "the study's folder: checkpoints, settings, the report (a rerun resumes it)"),
    FLAG("task", "lm|cls|pairs", F_CHOICE, 0, 0, "lm|cls|pairs", task, "language modelling (default), or the downstream protocol"),
    STR("data", "TRAIN.txt", data, "lm: the training text"),
    STR("valid", "VALID", valid, "lm: the validation text; cls, pairs: the validation set (label<TAB>text lines)"),
    STR("pretrain", "CORPUS.txt", pretrain, "cls, pairs: the masked-LM pretraining corpus"),
    STR("train", "A.tsv", train_set, "cls, pairs: the fine-tuning set"),
    STR("test", "C.tsv", test, "cls, pairs: the test set (no text of it may occur in --pretrain or --train)"),
    STR("tokenizer", "TOK", tokenizer, "texts as BPE tokens of TOK, kept in every checkpoint"),
    FLAG("subwords", "N", F_INT, 257, 1 << 20, NULL, subwords, "a byte-level BPE of N tokens trained on the training text (or --pretrain)"),
    STR("kinds", "K,K,...", kinds, "kinds or KIND@LAYOUT (default the MHE paper's: mha,sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul)"),
    FLAG("seeds", "N", F_INT, 1, COMPARE_MAX_SEEDS, NULL, seeds, "runs per kind (default 3); run s draws batches from seed + s"),
    FLAG("init-seed", "S", F_U64, 0, 0, NULL, init_seed, "run s initialises its weights from S + s (default: --seed)"),
    FLAG("batches", "N", F_INT, 0, 1e9, NULL, batches, "lm: validation batches of the final perplexity (default 0: all of the text)"),
    STR("pretrain-fields", "\"K=V ...\"", pre_fields, "cls, pairs: train fields of the pretraining (the others are the fine-tuning's)"),
    STR("baseline", "KIND", baseline, "PRR against this kind (default mha)"),
    STR("reference", "KIND", reference, "PEoP against this kind (default sha)"),
    STR("pairs", "A:B,...", pairs, "more claims to test: is kind A better than kind B?"),
    FLAG("jobs", "N", F_INT, 1, 64, NULL, jobs, "runs at once, the threads split between them (default: one run per thread)"),
    THREADS,
    FLAG("device", "cpu|cuda", F_CHOICE, 0, 0, "cpu|cuda", device, "where to train (cuda: build/cuda/mhe)"),
    FLAG("quiet", NULL, F_SWITCH, 0, 0, NULL, quiet, "no progress lines"),
};

#define CMD(name, flags, model_fields, train_fields, positional, about) { name, flags, (int)(sizeof flags / sizeof flags[0]), model_fields, train_fields, positional, about }

static const command_spec commands[] = {
    CMD("init", init_flags, 1, NULL, NULL,
        "Creates a model with freshly initialised weights. A word model takes its word state from\n"
        "the words of --data: embedding=vocab with --words 1 its vocabulary (the vocab_size - 4 most\n"
        "frequent words), hash=lsh with lsh_features=table its n-gram table.\n"),
    CMD("train", train_flags, 2, "*", NULL,
        "Trains a model. --task lm (default): a decoder learns the next byte, an\n"
        "encoder masked bytes (mlm_prob), an encoder-decoder (arch=encdec) continues a text:\n"
        "its encoder reads src_len bytes, its decoder predicts the seq_len bytes after them.\n"
        "--task cls: an encoder's classification head learns labelled texts, one\n"
        "`label<TAB>text` line each (integer labels; n_classes defaults to the largest + 1);\n"
        "validation prints loss, accuracy, macro-F1 and MCC. Texts are bytes, or words for a\n"
        "word model (embedding=hash-*, a loaded word model, or --words 1 for a word vocabulary);\n"
        "with a WordPiece tokenizer (an imported BERT) `label<TAB>A<TAB>B` is a pair, read as\n"
        "[CLS] A [SEP] B [SEP] with token types 0 and 1 (BERT's pair template).\n"
        "--model with a model without a head fine-tunes it: a new head, its weights kept.\n"
        "--task sr: Shuffle+Random pre-training of a word model on the words of a text (a new\n"
        "model is an encoder with token_head=sr unless --arch/--token_head say otherwise):\n"
        "per token, original / shuffled / replaced by a random word (sr_prob each).\n"
        "A new model comes from --config/model flags; --model starts from a file's weights and\n"
        "--resume continues a checkpoint written by this command exactly where it stopped\n"
        "(weights, AdamW moments, RNG, step; the train settings saved in it are used unless a\n"
        "flag overrides them); model flags are refused with either. Progress: step, loss,\n"
        "tokens/s, learning rate and time left; validation loss and perplexity every\n"
        "eval_every steps; peak memory at the end. Checkpoints are written atomically\n"
        "every save_every steps and at the end; the output is checked before the first step,\n"
        "and a state with a non-finite weight or moment is never saved. --device cuda trains\n"
        "--task lm, cls and sr on the GPU: the same batches, dropout masks, schedule and checkpoint.\n"
        "--dump-batches FILE records every batch drawn (tokens, targets, source) with mhe's loss,\n"
        "lr and gradient norm per step, the model and train config and the corpus's hash, for a\n"
        "step-by-step replay by the PyTorch twin (tools/python/mhe_torch.py replay). The checkpoint\n"
        "records the task: --resume continues it (another --task is refused). SIGINT, SIGTERM or\n"
        "SIGHUP stops after the step in progress, writes the checkpoint and exits 130 (SIGINT) or\n"
        "143; a second signal ends the run at once, the last checkpoint kept.\n"),
    CMD("eval", eval_flags, 0, "seq_len src_len batch sr_prob", NULL,
        "Mean cross-entropy (nats per byte), perplexity and bits per byte over up to N batches of\n"
        "consecutive windows of the text, shaped as `mhe train` shapes them.\n"
        "--stride S (a decoder LM): strided perplexity (MHE paper sec. 4.5) over all of the text:\n"
        "windows of seq_len bytes S apart, each scoring only its bytes past the previous window,\n"
        "so every byte after the first is scored once with >= seq_len - S bytes of context.\n"
        "--task cls: loss, accuracy, macro-F1 and MCC of the classification head on every\n"
        "`label<TAB>text` line of TEXT (cut to seq_len bytes, or words for a word model).\n"
        "--task sr: Shuffle+Random loss, accuracy, macro-F1 and MCC of a word model's S+R head\n"
        "on consecutive windows of the words of TEXT, corrupted with sr_prob under a fixed seed.\n"
        "--skip: a hybrid evaluated \"with skip\" (thesis Table 4.1).\n"
        "--indicators PREFIX: the attention-pattern indicators (thesis sec. 4.4.4: Entropy, Conc,\n"
        "HeadDiv, Sink, LocFoc0..3) of every layer and head over the evaluation batches, from the\n"
        "probabilities of the reference path: PREFIX.csv, PREFIX.svg (a chart per layer) and\n"
        "PREFIX_maps.svg (heat-maps of every layer and head for the first --map-len bytes).\n"
        "--device cuda (--task lm, with or without --stride, cls or sr): the forward passes on the\n"
        "GPU, over the same windows and batches; a model the device cannot run is refused, not run\n"
        "here.\n"),
    CMD("generate", generate_flags, 0, "seed", NULL,
        "Writes the prompt and exactly N sampled tokens after it, with a KV cache. An\n"
        "encoder-decoder model (arch=encdec) first encodes --source and its decoder starts\n"
        "from --prompt (default: the last byte of the source). Prints the KV-cache size on stderr.\n"
        "--device cuda (a decoder, or encdec: the source encoded once, its cross-attention K|V\n"
        "kept on the GPU): the prompt runs as one batch into the GPU's KV cache, then\n"
        "each token is decoded there; sampling stays on the host with the same RNG, so greedy\n"
        "output equals the CPU's. A model the device cannot run is refused, not run here.\n"),
    CMD("grad", grad_flags, 0, NULL, NULL,
        "Runs one forward and backward pass (no dropout) and writes the loss (tensor `loss`,\n"
        "shape [1]) and the gradient of every parameter under the parameter's name.\n"
        "TOKENS.txt: one sequence per line, T+1 whitespace-separated token ids, the same\n"
        "count on every line; inputs are the first T ids, targets the last T; the lines\n"
        "form the batch. A target of -1 is ignored by the loss. A `.` in place of an id is\n"
        "padding (only at the end of a line): those positions are masked out of attention\n"
        "and of the loss. An encoder-decoder model reads `SOURCE IDS | DECODER IDS`: the\n"
        "source ids (the same count on every line, padding allowed) go to the encoder.\n"
        "A word model (embedding=hash-*, or a word vocabulary) reads `LABELS | TEXT`: T targets\n"
        "of its token head (S+R: 0 original, 1 shuffled, 2 random; -1 ignored; `.` pads the\n"
        "end) and a text of exactly as many words (the word splitter; the items <pad> <unk>\n"
        "<s> </s> are special tokens). A NUL byte in the file is refused.\n"),
    CMD("export", export_flags, 0, NULL, NULL,
        "Writes the model's weights without optimizer state: as a safetensors file, or (FILE.h)\n"
        "as a C header with `static const unsigned char NAME[]`, NAME_SIZE and NAME_ARENA_BYTES,\n"
        "the bytes of one arena that holds the model loaded for inference and a KV cache of N\n"
        "tokens: see examples/embedded.c.\n"),
    CMD("reparam", reparam_flags, 0, NULL, NULL,
        "Collaborative attention (Cordonnier et al. 2020, sec. 3.3): every mha layer of a trained\n"
        "model becomes a collab layer whose heads share query/key projections of width D~ = D,\n"
        "from a CP decomposition (alternating least squares) of the stacked W_Q^(i) W_K^(i)T; the\n"
        "query biases fold into the content bias (eq. 12). D >= n_heads * d_head is exact. The\n"
        "logits keep the 1/sqrt(d_head) scale. Prints each layer's relative reconstruction error\n"
        "and time; writes OUT only when every layer converged.\n"),
    CMD("tokenize", tokenize_flags, 0, NULL, "train|encode|decode|convert",
        "Byte-level BPE and WordPiece (mhe.h section 8). train: learns a byte-level BPE of --vocab N\n"
        "tokens from --data (ties: highest count, then lowest left id, then lowest right id) and\n"
        "writes --out. encode: prints the ids of --data (space-separated, one line; --special: with\n"
        "BERT's [CLS] and [SEP] around them); decode: writes the text of the ids in --data; both\n"
        "with --tokenizer TOK or the tokenizer of --model M. convert: reads --tokenizer (a Hugging\n"
        "Face tokenizer.json of a byte-level BPE or of a WordPiece model, encoded exactly as the\n"
        "tokenizers package does) and writes mhe's text form to --out.\n"
        "A model trained with `mhe train --tokenizer TOK` keeps it in its checkpoint.\n"),
    CMD("import", import_flags, 0, NULL, "DIR",
        "Converts a Hugging Face GPT-2 (GPT2LMHeadModel) or BERT (BertForMaskedLM,\n"
        "BertForSequenceClassification) directory, config.json and model.safetensors as\n"
        "save_pretrained writes them, to an mhe model with the same logits: GPT-2's Conv1D\n"
        "weights transposed and its fused c_attn split into Q, K, V; BERT's post-norm, erf GELU, token\n"
        "types and embedding LayerNorm, its MLM head's transform and output bias, its\n"
        "pooler. A config key, activation, position scheme or tensor mhe cannot represent is\n"
        "refused by name and nothing is written. A tokenizer.json beside the weights, byte-level\n"
        "BPE (GPT-2's) or WordPiece (BERT's), is attached: eval, generate and train then read text\n"
        "(a classification example as [CLS] text [SEP]).\n"),
    CMD("compare", compare_flags, 1, "*", NULL,
        "The comparison study of attention kinds on your data: for every kind of --kinds and each of\n"
        "--seeds seeds a training run (weights from --init-seed + s, batches from --seed + s), then\n"
        "DIR/report.md and report.json (per kind: parameters, the metric's mean, std and 95 % interval\n"
        "over seeds, PRR against --baseline, PEoP against --reference, time per run; the MHE paper's\n"
        "claims and --pairs as holds / does not hold / not separated under Welch's t-test), curves.csv\n"
        "and the plots final.svg, tradeoff.svg and curves.svg.\n"
        "--task lm (default): a model per kind trained on --data, validation perplexity on --valid\n"
        "(bytes, --tokenizer, or --subwords N). --task cls or pairs: the papers' downstream protocol:\n"
        "a masked-LM encoder pretrained on --pretrain (train fields of --pretrain-fields over the\n"
        "others), fine-tuned with a new head on --train, validated on --valid, tested on --test\n"
        "(accuracy, macro-F1). Model and train fields are those of mhe train; a run's numbers equal\n"
        "separate mhe init/train/eval runs of the same settings.\n"
        "Every run keeps its checkpoints in DIR/runs: the same command again resumes a stopped study\n"
        "where it stopped (SIGINT, SIGTERM: the runs in flight save their step and exit 130 or 143);\n"
        "DIR/settings.txt refuses a rerun with other settings, naming the setting. Every input is\n"
        "checked before the first step. --device cuda trains each run on the GPU as mhe train\n"
        "--device cuda does, one run at a time.\n"),
    CMD("logits", logits_flags, 0, NULL, NULL,
        "Runs one forward pass (no dropout) over the token ids and prints the logits, one row\n"
        "per token (--task cls: one row, the classification head's), as %.9g numbers.\n"),
    CMD("hash", hash_flags, 0, NULL, "TEXT...",
        "Splits each TEXT into words (lower-cased runs of letters/digits/_/bytes >= 0x80, or of\n"
        "punctuation) and prints, one line each, how the model embeds the word, computed by its\n"
        "own hasher (seen in training or not):\n"
        "  WORD<TAB>id N       embedding=vocab: tok_emb row (1 = <unk>)\n"
        "  WORD<TAB>bucket N   hash-emb: the bucket (md5: digest mod N; lsh: argmax form)\n"
        "  WORD<TAB>bits HEX   hash-pool/add/proj: the T bits, packed MSB-first\n"),
};

static const command_spec *find_command(const char *name) {
    size_t i;
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static const flag_spec *find_flag(const command_spec *c, const char *name) {
    int i;
    for (i = 0; i < c->n_flags; i++) if (strcmp(c->flags[i].name, name) == 0) return &c->flags[i];
    return NULL;
}

/* was the command's flag --name given? */
static int given(const opts *o, const char *name) {
    const flag_spec *f = find_flag(o->cmd, name);
    return f && o->given[f - o->cmd->flags];
}

static int train_field_index(const char *key) {
    mhe_train_config t = mhe_train_config_default();
    const char *k;
    char v[64];
    int i;
    for (i = 0; mhe_train_config_field(&t, i, &k, v, sizeof v); i++) if (strcmp(k, key) == 0) return i;
    return -1;
}

static int model_field_index(const char *key) {
    mhe_config c = mhe_config_default();
    const char *k;
    char v[512];
    int i;
    for (i = 0; mhe_config_field(&c, i, &k, v, sizeof v); i++) if (strcmp(k, key) == 0) return i;
    return -1;
}
static int model_given(const opts *o, const char *key) { int i = model_field_index(key); return i >= 0 && o->model_given[i]; }

/* does command c use the train field `key`? */
static int takes_train_field(const command_spec *c, const char *key) {
    const char *p = c->train_fields;
    size_t n = strlen(key);
    if (!p) return 0;
    if (strcmp(p, "*") == 0) return 1;
    for (; (p = strstr(p, key)) != NULL; p += n)
        if ((p == c->train_fields || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static void print_help(const command_spec *c) {
    mhe_config mc = mhe_config_default();
    mhe_train_config t = mhe_train_config_default();
    const char *k;
    char v[512], item[96];
    int i, col = printf("usage: mhe %s", c->name);
    for (i = 0; i <= c->n_flags + 2; i++) {
        const flag_spec *f = i < c->n_flags ? &c->flags[i] : NULL;
        if (f) snprintf(item, sizeof item, "%s--%s%s%s%s", f->required ? "" : "[", f->name, f->arg ? " " : "", f->arg ? f->arg : "", f->required ? "" : "]");
        else if (i == c->n_flags && c->model_fields) snprintf(item, sizeof item, "[--MODEL_FIELD VALUE ...]");
        else if (i == c->n_flags + 1 && c->train_fields) snprintf(item, sizeof item, "[--TRAIN_FIELD VALUE ...]");
        else if (i == c->n_flags + 2 && c->positional) snprintf(item, sizeof item, "%s", c->positional);
        else continue;
        if (col + 1 + (int)strlen(item) > 96) col = printf("\n%*s", (int)strlen(c->name) + 11, "") - 1;
        col += printf(" %s", item);
    }
    printf("\n%s", c->about);
    printf("Flags:\n");
    for (i = 0; i < c->n_flags; i++) {
        const flag_spec *f = &c->flags[i];
        snprintf(item, sizeof item, "--%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        printf("  %-28s %s", item, f->help);
        if (f->type == F_INT) printf(" (an integer in [%.0f, %.0f])", f->lo, f->hi);
        if (f->type == F_FLOAT) printf(" (a number in [%g, %g])", f->lo, f->hi);
        if (f->type == F_U64) printf(" (an unsigned 64-bit integer)");
        printf("%s\n", f->required ? " (required)" : "");
    }
    if (c->train_fields) {
        printf("Train fields%s:\n", strcmp(c->train_fields, "*") ? " it uses" : "");
        for (i = 0; mhe_train_config_field(&t, i, &k, v, sizeof v); i++)
            if (takes_train_field(c, k)) printf("    --%-16s (default %s)\n", k, v);
    }
    if (c->model_fields == 2) printf("Model fields (a new model only; refused with --model or --resume): see `mhe init --help`.\n");
    if (c->model_fields == 1) {
        printf("Model fields:\n");
        for (i = 0; mhe_config_field(&mc, i, &k, v, sizeof v); i++) printf("    --%-16s (default %s)\n", k, v);
    }
}

/* the config file first, then the field flags in their order, so flags override the file */
typedef struct { const char *key, *value; int model; } field_arg;

static int apply_fields(opts *o, const field_arg *fa, int n) {
    char err[MHE_ERR_LEN];
    int i;
    if (o->config_path) {
        char *text;
        size_t len;
        if (!read_text(o->config_path, &text, &len)) return 0;
        if (mhe_config_parse(&o->cfg, text, len, err) != MHE_OK) {
            fprintf(stderr, "mhe: %s: %s\n", o->config_path, err);
            free(text);
            return 0;
        }
        {   /* does the file set vocab_size? (a tokenizer's size must then agree, as with the flag) */
            mhe_config probe = mhe_config_default();
            probe.vocab_size = -1;
            o->cfg_vocab = mhe_config_parse(&probe, text, len, err) == MHE_OK && probe.vocab_size != -1;
        }
        free(text);
        o->cfg_given = 1;
    }
    for (i = 0; i < n; i++) {
        mhe_status s = fa[i].model ? mhe_config_set(&o->cfg, fa[i].key, fa[i].value, err) : mhe_train_config_set(&o->tc, fa[i].key, fa[i].value, err);
        if (s != MHE_OK) { fprintf(stderr, "mhe: --%s: %s\n", fa[i].key, err); return 0; }
        if (fa[i].model) o->cfg_given = 1;
    }
    return 1;
}

/* one flag of the command's table: 1, 0 for a bad value (exit 1) or -1 for a usage error (exit 2) */
static int set_flag(opts *o, const flag_spec *f, const char *flag, const char *v) {
    char *p = (char *)o + f->off;
    long x;
    double d;
    int r;
    switch (f->type) {
    case F_STR: *(const char **)(void *)p = v; return 1;
    case F_CHOICE: {
        const char *c = f->choices;
        size_t n = strlen(v);
        while (c) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            if (n == len && n && strncmp(c, v, n) == 0) { *(const char **)(void *)p = v; return 1; }
            c = bar ? bar + 1 : NULL;
        }
        fprintf(stderr, "mhe: %s is %s, not '%s'\n", flag, f->choices, v);
        return -1;
    }
    case F_INT:
        r = arg_int_in(flag, v, (long)f->lo, (long)f->hi, &x);
        if (r == 1) *(long *)(void *)p = x;
        return r == 1 ? 1 : r == 0 ? -1 : 0;
    case F_U64:
        r = arg_u64(flag, v, (unsigned long long *)(void *)p);
        return r == 1 ? 1 : r == 0 ? -1 : 0;
    case F_FLOAT:
        r = arg_double_in(flag, v, f->lo, f->hi, &d);
        if (r == 1) *(double *)(void *)p = d;
        return r == 1 ? 1 : r == 0 ? -1 : 0;
    }
    return -1;
}

/* the flags of command c. Returns 1, 0 for a bad value (exit 1) or -1 for a usage error (exit 2) */
static int parse_opts(const command_spec *c, int argc, char **argv, opts *o) {
    field_arg *fa;
    int i, n_fa = 0, r = 1;
    memset(o, 0, sizeof *o);
    o->cfg = mhe_config_default();
    o->tc = mhe_train_config_default();
    o->cmd = c;
    o->seed = 42; o->n_tokens = 200; o->top_k = 40; o->temperature = 0.8; o->batches = 50; o->map_len = 32;
    if (!(fa = (field_arg *)malloc((size_t)argc * sizeof *fa))) { fprintf(stderr, "mhe: out of memory\n"); return 0; }
    for (i = 2; i < argc && r == 1; i++) {
        const char *a = argv[i], *key = a + 2, *v = i + 1 < argc ? argv[i + 1] : NULL;
        const flag_spec *f;
        int mi, ti;
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            if (c->positional && o->n_args < (int)(sizeof o->args / sizeof o->args[0])) { o->args[o->n_args++] = a; continue; }
            fprintf(stderr, "mhe: %s: unexpected argument '%s' (see mhe %s --help)\n", c->name, a, c->name);
            r = -1;
            break;
        }
        if ((f = find_flag(c, key)) != NULL) {
            int at = (int)(f - c->flags);
            if (o->given[at]) { fprintf(stderr, "mhe: %s given twice\n", a); r = -1; break; }
            o->given[at] = 1;
            if (f->type == F_SWITCH) { *(int *)(void *)((char *)o + f->off) = 1; continue; }
            if (!v) { fprintf(stderr, "mhe: %s needs a value (%s)\n", a, f->arg); r = -1; break; }
            i++;
            r = set_flag(o, f, a, v);
            continue;
        }
        mi = model_field_index(key);
        ti = train_field_index(key);
        if ((mi >= 0 && c->model_fields) || (ti >= 0 && takes_train_field(c, key))) {
            if (mi >= 0 ? o->model_given[mi] : o->tc_given[ti]) { fprintf(stderr, "mhe: %s given twice\n", a); r = -1; break; }
            if (!v) { fprintf(stderr, "mhe: %s needs a value\n", a); r = -1; break; }
            i++;
            if (mi >= 0) o->model_given[mi] = 1; else o->tc_given[ti] = 1;
            fa[n_fa].key = key; fa[n_fa].value = v; fa[n_fa].model = mi >= 0; n_fa++;
            continue;
        }
        if (mi >= 0) fprintf(stderr, "mhe: %s is a model field: mhe %s takes the model from --model and does not change it\n", a, c->name);
        else if (ti >= 0) fprintf(stderr, "mhe: %s is a train field that mhe %s does not use (see mhe %s --help)\n", a, c->name, c->name);
        else {
            size_t k;
            for (k = 0; k < sizeof commands / sizeof commands[0] && !find_flag(&commands[k], key); k++) {}
            if (k < sizeof commands / sizeof commands[0]) fprintf(stderr, "mhe: %s is not a flag of mhe %s (see mhe %s --help)\n", a, c->name, c->name);
            else fprintf(stderr, "mhe: unknown option %s (see mhe %s --help)\n", a, c->name);
        }
        r = -1;
    }
    for (i = 0; i < c->n_flags && r == 1; i++)
        if (c->flags[i].required && !o->given[i]) { fprintf(stderr, "mhe: %s: --%s %s is required\n", c->name, c->flags[i].name, c->flags[i].arg); r = 0; }
    if (r == 1 && !apply_fields(o, fa, n_fa)) r = 0;
    free(fa);
    if (r != 1) return r;
    o->words = o->words_s && o->words_s[0] == '1';
    o->cuda = o->device && strcmp(o->device, "cuda") == 0;
    o->precision = !o->precision_s ? (o->tf32_s && o->tf32_s[0] == '1') : o->precision_s[0] == 't' ? 1 : o->precision_s[0] == 'b' ? 2 : 0;
    if ((o->tf32_s || o->precision_s) && !o->cuda) { fprintf(stderr, "mhe: --%s sets the GPU's GEMMs: give it with --device cuda\n", o->precision_s ? "precision" : "tf32"); return -1; }
    if (o->tf32_s && o->precision_s && o->precision != (o->tf32_s[0] == '1')) { fprintf(stderr, "mhe: --tf32 %s and --precision %s disagree: give one\n", o->tf32_s, o->precision_s); return -1; }
#ifndef _OPENMP
    if (o->threads > 1) { fprintf(stderr, "mhe: --threads %ld: this mhe was built without OpenMP (one thread)\n", o->threads); return 0; }
#endif
#ifndef MHE_CUDA
    if (o->cuda) { fprintf(stderr, "mhe: --device cuda: this mhe was built without CUDA (make cuda builds build/cuda/mhe)\n"); return 0; }
#endif
    set_threads((int)o->threads);
    return 1;
}

/* --help, or the parsed flags of the command: 1 to go on, else *rc is the exit status */
static int command_opts(const char *name, int argc, char **argv, opts *o, int *rc) {
    const command_spec *c = find_command(name);
    int r;
    if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) { print_help(c); *rc = 0; return 0; }
    r = parse_opts(c, argc, argv, o);
    *rc = r < 0 ? 2 : 1;
    return r == 1;
}

/* ---- output paths ---------------------------------------------------------- */

#ifdef _WIN32
/* st_ino is always 0 there: the volume serial number and file index instead */
static int file_id(const char *p, BY_HANDLE_FILE_INFORMATION *fi) {
    HANDLE h = CreateFileA(p, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                           FILE_FLAG_BACKUP_SEMANTICS, NULL);
    int ok = h != INVALID_HANDLE_VALUE && GetFileInformationByHandle(h, fi);
    if (h != INVALID_HANDLE_VALUE) CloseHandle(h);
    return ok;
}
#endif

/* do a and b name the same file? (device and inode where both exist) */
static int same_file(const char *a, const char *b) {
#ifdef _WIN32
    BY_HANDLE_FILE_INFORMATION fa, fb;
    if (strcmp(a, b) == 0) return 1;
    return file_id(a, &fa) && file_id(b, &fb) && fa.dwVolumeSerialNumber == fb.dwVolumeSerialNumber &&
           fa.nFileIndexHigh == fb.nFileIndexHigh && fa.nFileIndexLow == fb.nFileIndexLow;
#else
    struct stat sa, sb;
    if (strcmp(a, b) == 0) return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
#endif
}

/* an output of the command, checked before any work: none of its inputs
   (train may write over its --resume file: that is how a run continues),
   and usable under mhe.h's output policy (a regular file or absent, a
   temporary file can be created beside it) */
static int check_output(const opts *o, const char *out, int resume_ok) {
    const char *in[] = { o->config_path, o->model, o->data, o->valid, o->tokens, o->resume, o->tokenizer,
                         o->in_files[0], o->in_files[1], o->in_files[2] };
    static const char *flag[] = { "--config", "--model", "--data", "--valid", "--tokens", "--resume", "--tokenizer", "", "", "" };
    char err[MHE_ERR_LEN];
    int i;
    for (i = 0; i < (int)(sizeof in / sizeof in[0]); i++)
        if (in[i] && !(i == 5 && resume_ok) && same_file(out, in[i])) {
            if (i >= 7) fprintf(stderr, "mhe: the output %s is the input %s, which %s reads: refused\n", out, in[i], o->cmd->name);
            else fprintf(stderr, "mhe: the output %s is the input %s %s: refused\n", out, flag[i], in[i]);
            return 0;
        }
    if (mhe_out_check(out, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    return 1;
}

static int out_open(mhe_out *w, const char *path) {
    char err[MHE_ERR_LEN];
    if (mhe_out_open(w, path, err) == MHE_OK) return 1;
    fprintf(stderr, "mhe: %s\n", err);
    return 0;
}

static int out_commit(mhe_out *w) {
    char err[MHE_ERR_LEN];
    if (mhe_out_commit(w, err) == MHE_OK) return 1;
    fprintf(stderr, "mhe: %s\n", err);
    return 0;
}

/* ---- signals ----------------------------------------------------------------
   SIGINT, SIGTERM and SIGHUP (taken as SIGTERM) end every command by the
   signal (the shell sees 130 or 143), after removing the temporary file of
   a write in progress (mhe_out_remove_pending): an interrupted write leaves
   the old target and nothing else. While train steps, the first signal only
   asks it to stop (train_steps saves and exits 130 or 143); a second one
   ends it at once. The handler does only async-signal-safe things. */

static volatile sig_atomic_t stop_signal;   /* the signal that asked train to stop (0: none) */
static volatile sig_atomic_t stop_asks;     /* 1 while train steps: a first signal asks, not ends */

static void on_signal(int sig) {
    if (stop_asks && !stop_signal) {
        stop_signal = sig;
#ifdef _WIN32
        signal(sig, on_signal);   /* signal() resets the handler on delivery there */
#endif
        return;
    }
    mhe_out_remove_pending();
#ifdef SIGHUP
    if (sig == SIGHUP) sig = SIGTERM;
#endif
    signal(sig, SIG_DFL);
    /* blocked while this handler runs (sa_mask): delivered, with the default action, as it returns */
    raise(sig);
}

static void catch_signals(void) {
#ifndef _WIN32
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction sa;
    size_t i;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&sa.sa_mask, sigs[i]);   /* one handler at a time */
    for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
#else
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
#endif
}

/* SIGHUP counts as SIGTERM */
static int exit_status_of(int sig) { return sig == SIGINT ? 130 : 143; }

static const char *signal_name(int sig) {
#ifdef SIGHUP
    if (sig == SIGHUP) return "SIGHUP";
#endif
    return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

/* A text file as tokens: its bytes, or the BPE tokens of a model's tokenizer
   (bpe not NULL); rejects empty and binary files. The third way, words, is
   read_words below. */
static int load_corpus(const char *path, const mhe_bpe *bpe, int **tokens, size_t *n) {
    char err[MHE_ERR_LEN];
    if (!path) { fprintf(stderr, "mhe: no corpus given (--data FILE)\n"); return 0; }
    if ((bpe ? mhe_bpe_read_tokens(bpe, path, tokens, n, NULL, err) : mhe_read_text_tokens(path, tokens, n, NULL, err)) != MHE_OK) {
        fprintf(stderr, "mhe: %s\n", err);
        return 0;
    }
    return 1;
}

static int bytes_fit(const mhe_model *m, const char *what);

/* a command-line text as the model's tokens (fresh malloc'd array) */
static int text_tokens(const mhe_model *m, const char *text, size_t len, int **tok, size_t *n) {
    char err[MHE_ERR_LEN];
    *n = 0;
    *tok = NULL;
    if (!bytes_fit(m, "text")) return 0;
    *tok = (int *)malloc((mhe_bpe_max_ids(m->bpe, len) + 2) * sizeof(int));
    if (!*tok) { fprintf(stderr, "mhe: out of memory\n"); return 0; }
    if (!m->bpe) { *n = mhe_tokenize_bytes(text, len, *tok); return 1; }
    if (mhe_bpe_encode(m->bpe, text, len, *tok, mhe_bpe_max_ids(m->bpe, len), n, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    return 1;
}

/* --tokenizer FILE of a new model: read, and its size becomes vocab_size
   (one given otherwise must agree); a word model is refused */
static int read_tokenizer(opts *o) {
    static mhe_bpe tok;
    int V;
    if (!o->tokenizer) return 1;
    if (o->words || o->cfg.embedding != MHE_EMB_VOCAB || (o->task && strcmp(o->task, "sr") == 0)) {
        fprintf(stderr, "mhe: --tokenizer gives a model BPE tokens; a word model (--words 1, embedding=hash-*, --task sr) reads words\n");
        return 0;
    }
    mhe_bpe_init(&tok, NULL);
    if (mhe_bpe_load(&tok, o->tokenizer) != MHE_OK) { fprintf(stderr, "mhe: %s\n", tok.err); return 0; }
    V = mhe_config_default().vocab_size;
    if ((model_given(o, "vocab_size") || o->cfg_vocab || o->cfg.vocab_size != V) && o->cfg.vocab_size != tok.n_tokens) {
        fprintf(stderr, "mhe: vocab_size %d%s%s, but the tokenizer %s has %d tokens (leave vocab_size out to take its size)\n", o->cfg.vocab_size,
                model_given(o, "vocab_size") ? "" : " in --config ", model_given(o, "vocab_size") ? "" : o->config_path, o->tokenizer, tok.n_tokens);
        mhe_bpe_free(&tok);
        return 0;
    }
    o->cfg.vocab_size = tok.n_tokens;
    o->tok = &tok;
    return 1;
}

/* tokens as text on stdout: bytes, or what the model's tokenizer decodes them to */
static int print_tokens(const mhe_model *m, const int *tok, size_t n) {
    size_t i, len;
    char err[MHE_ERR_LEN];
    for (i = 0; i < n; i++) {
        if (!m->bpe) { putchar(tok[i]); continue; }
        if (mhe_bpe_decode(m->bpe, tok + i, 1, NULL, 0, &len, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
        fwrite(m->bpe->bytes + m->bpe->start[tok[i]], 1, len, stdout);
    }
    return 1;
}

/* a model file, refused when a weight is NaN or infinite: every command
   computes with the weights or passes them on */
static int load_model(const char *path, mhe_model *m) {
    mhe_status s;
    if (!path) { fprintf(stderr, "mhe: no model given (--model FILE)\n"); return 0; }
    s = mhe_model_load(m, path, NULL);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s (%s)\n", m->err, mhe_status_str(s)); return 0; }
    if (mhe_model_check_finite(m) != MHE_OK) {
        fprintf(stderr, "mhe: %s: %s: refused\n", path, m->err);
        mhe_model_free(m);
        return 0;
    }
    return 1;
}

#ifdef MHE_CUDA
/* m's weights on the GPU, or 0 and the reason in err. A config the device
   cannot run fails here with mhe_cuda_supports's message. */
static int device_model(mhe_cuda_model *g, mhe_model *m, int precision, FILE *say, char *err) {
    char name[256];
    int major = 0, minor = 0;
    if (mhe_cuda_device(name, sizeof name, &major, &minor, g->err) != MHE_OK || mhe_cuda_model_init(g, m, precision) != MHE_OK) {
        snprintf(err, MHE_ERR_LEN, "%s", g->err);
        return 0;
    }
    if (say) fprintf(say, "device: %s (compute capability %d.%d)%s\n", name, major, minor, precision == 1 ? ", TF32 GEMMs" : precision == 2 ? ", bf16 GEMMs" : "");
    return 1;
}

/* --device cuda: m's weights on the GPU; nothing runs on the CPU when it fails */
static int open_device(const opts *o, mhe_model *m, mhe_cuda_model *g, FILE *say) {
    char err[MHE_ERR_LEN];
    if (device_model(g, m, o->precision, say, err)) return 1;
    fprintf(stderr, "mhe: --device cuda: %s\n", err);
    return 0;
}
#endif

/* ---- word data ------------------------------------------------------------ */

/* does the model take words (a hash embedding, or a word vocabulary)? */
static int word_model(const mhe_model *m) { return m->cfg.embedding != MHE_EMB_VOCAB || m->vocab.n > 0; }

/* Text read as bytes into a model with no tokenizer whose vocabulary is far past the 256 bytes (an
   imported GPT-2 or BERT without its tokenizer.json): ids 0..255 of that vocabulary are other
   tokens, so every result would be quietly wrong. Refused; a byte model with a few extra ids
   (a [MASK]) stays under MHE_CLI_BYTE_VOCAB. */
#define MHE_CLI_BYTE_VOCAB 512
static int bytes_fit(const mhe_model *m, const char *what) {
    if (m->bpe || word_model(m) || m->cfg.vocab_size <= MHE_CLI_BYTE_VOCAB) return 1;
    fprintf(stderr, "mhe: %s: the model has %d token ids and no tokenizer, so text would be read as bytes (ids 0..255, "
            "other tokens of its vocabulary): refused. Give token ids (logits --ids, generate --ids), or import the model "
            "with its byte-level BPE tokenizer.json beside the weights\n", what, m->cfg.vocab_size);
    return 0;
}

static int lex_copy(mhe_lexicon *dst, const mhe_lexicon *src) {
    int i, t;
    mhe_lexicon_init(dst, NULL);
    for (i = 0; i < src->n; i++) {
        size_t len;
        const char *w = mhe_lexicon_word(src, i, &len);
        if (mhe_lexicon_intern(dst, w, len, 0, &t) != MHE_OK) { fprintf(stderr, "mhe: out of memory\n"); return 0; }
        dst->count[t] = src->count[i];
    }
    return 1;
}

/* what a new or loaded word model still needs from the training data: a
   word vocabulary (embedding=vocab) or the LSH n-gram table (lsh_features=table) */
static int word_state(mhe_model *m, const mhe_lexicon *train_types, const char *data_path) {
    const mhe_config *c = &m->cfg;
    if (c->embedding == MHE_EMB_VOCAB && m->vocab.n == 0) {
        if (mhe_model_set_vocab(m, train_types) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 0; }
        printf("word vocabulary: the %d most frequent of %d word types of %s (vocab_size %d with %d special tokens)\n", m->vocab.n,
               train_types->n, data_path, c->vocab_size, MHE_N_SPECIAL);
    }
    if (c->embedding != MHE_EMB_VOCAB && c->hash == MHE_WORD_HASH_LSH && c->lsh_features && !m->lsh_ready) {
        void *buf;
        size_t len;
        char err[MHE_ERR_LEN];
        mhe_status s;
        if (mhe_read_file(data_path, &buf, &len, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
        s = mhe_model_set_ngrams(m, (const char *)buf, len);
        free(buf);
        if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 0; }
        printf("LSH n-gram table: the %zu most frequent n-grams of %s\n", m->lsh.table_len - 4, data_path);
    }
    return 1;
}

static int read_words(const char *path, mhe_lexicon *x, int **tok, size_t *n) {
    char err[MHE_ERR_LEN];
    if (!path) { fprintf(stderr, "mhe: no corpus given (--data FILE)\n"); return 0; }
    if (mhe_read_words(path, x, tok, n, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    return 1;
}

static int feats(mhe_model *m, const mhe_lexicon *x, mhe_word_feats *f) {
    if (mhe_word_feats_update(m, x, f) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 0; }
    return 1;
}

static void print_sr(const char *what, const mhe_cls_metrics *r) {
    printf("%sS+R loss %.4f  accuracy %.4f  macro-F1 %.4f  MCC %.4f  (%lld tokens)\n", what, r->loss, r->accuracy, r->macro_f1, r->mcc,
           (long long)r->n);
}

static void describe(const mhe_model *m) {
    const char *k;
    char v[512];
    int i;
    printf("model:");
    for (i = 0; mhe_config_field(&m->cfg, i, &k, v, sizeof v); i++) printf(" %s=%s", k, v);
    printf("\nparameters: %lld (%.2f M)\n", (long long)m->n_params, m->n_params / 1e6);
    if (m->cfg.embedding != MHE_EMB_VOCAB || m->vocab.n)   /* thesis eq. 2.7 */
        printf("embedding parameters: %lld (PoEP %.1f%%)\n", (long long)mhe_model_emb_params(m),
               100 * mhe_poep((double)mhe_model_emb_params(m), (double)m->n_params));
}

/* ---- init --------------------------------------------------------------- */

static int cmd_init(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_status s;
    int rc;
    if (!command_opts("init", argc, argv, &o, &rc)) return rc;
    if (o.words && o.cfg.embedding != MHE_EMB_VOCAB) {
        fprintf(stderr, "mhe: init: --words 1 gives embedding=vocab a word vocabulary; a hash embedding takes words already\n");
        return 2;
    }
    if (o.data && !(o.cfg.embedding == MHE_EMB_VOCAB ? o.words : o.cfg.hash == MHE_WORD_HASH_LSH && o.cfg.lsh_features)) {
        fprintf(stderr, "mhe: init: --data is read only for a word vocabulary (--words 1) or an LSH n-gram table (hash=lsh, lsh_features=table)\n");
        return 2;
    }
    if (!check_output(&o, o.out, 0)) return 1;
    if (!read_tokenizer(&o)) return 1;
    s = mhe_model_init(&m, &o.cfg, o.seed, NULL);
    if (s != MHE_OK) return die("init: %s%s", m.err, "");
    if (o.tok && mhe_model_set_bpe(&m, o.tok) != MHE_OK) { fprintf(stderr, "mhe: init: %s\n", m.err); mhe_model_free(&m); return 1; }
    if ((o.cfg.embedding == MHE_EMB_VOCAB && o.words) ||
        (o.cfg.embedding != MHE_EMB_VOCAB && o.cfg.hash == MHE_WORD_HASH_LSH && o.cfg.lsh_features)) {
        mhe_lexicon x;
        int *tok = NULL, ok;
        size_t n;
        if (!o.data) { fprintf(stderr, "mhe: init: this word model takes its %s from a corpus: give --data TEXT\n",
                               o.cfg.embedding == MHE_EMB_VOCAB ? "vocabulary" : "n-gram table"); mhe_model_free(&m); return 1; }
        mhe_lexicon_init(&x, NULL);
        ok = read_words(o.data, &x, &tok, &n) && word_state(&m, &x, o.data);
        free(tok);
        mhe_lexicon_free(&x);
        if (!ok) { mhe_model_free(&m); return 1; }
    }
    s = mhe_checkpoint_save(&m, NULL, o.out);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); mhe_model_free(&m); return 1; }
    describe(&m);
    printf("wrote %s\n", o.out);
    mhe_model_free(&m);
    return 0;
}

/* ---- train -------------------------------------------------------------- */

static void print_cls(const char *what, const mhe_cls_metrics *r) {
    printf("%s loss %.4f  accuracy %.4f  macro-F1 %.4f  MCC %.4f  (%lld examples)\n", what, r->loss, r->accuracy,
           r->macro_f1, r->mcc, (long long)r->n);
}

/* the task of a --resume checkpoint: the saved one ("task" metadata) unless
   --task names another, which is refused. A file from before the task was
   saved is taken as --task says, else as its head says: a classification
   head (n_classes > 0) cls, the S+R head sr, otherwise lm. */
static int resume_task(opts *o, const mhe_safetensors *st) {
    const char *saved = mhe_st_meta(st, "task"), *n_classes, *head;
    static const char *known[] = { "lm", "cls", "sr" };
    size_t i;
    if (saved) {
        for (i = 0; i < sizeof known / sizeof known[0] && strcmp(saved, known[i]) != 0; i++) {}
        if (i == sizeof known / sizeof known[0]) {
            fprintf(stderr, "mhe: --resume %s: the saved task '%.40s' is not lm, cls or sr\n", o->resume, saved);
            return 0;
        }
        if (o->task && strcmp(o->task, saved) != 0) {
            fprintf(stderr, "mhe: --task %s, but --resume %s continues a --task %s run: refused (leave --task out to continue it, or "
                            "train its weights on another task with --model %s)\n", o->task, o->resume, saved, o->resume);
            return 0;
        }
        o->task = known[i];
        return 1;
    }
    if (o->task) return 1;
    n_classes = mhe_st_meta(st, "n_classes");
    head = mhe_st_meta(st, "token_head");
    o->task = n_classes && strcmp(n_classes, "0") != 0 ? "cls" : head && strcmp(head, "sr") == 0 ? "sr" : "lm";
    fprintf(stderr, "mhe: note: --resume %s does not record its task (written by an older mhe): continuing as --task %s, %s; "
                    "give --task to choose\n", o->resume, o->task,
            o->task[0] == 'c' ? "as its classification head says" : o->task[0] == 's' ? "as its S+R head says" : "as it has no task head");
    return 1;
}

/* the train settings saved in the --resume checkpoint, overridden by flags
   given now, and its task; a saved setting that is not valid is refused */
static int resume_settings(opts *o) {
    void *buf;
    size_t size;
    mhe_safetensors st;
    char err[MHE_ERR_LEN];
    mhe_train_config tc = mhe_train_config_default();
    const char *k;
    char v[64];
    int i;
    if (mhe_read_file(o->resume, &buf, &size, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    if (mhe_st_parse(&st, buf, size, NULL) != MHE_OK) {   /* it loaded a moment ago: changed since */
        fprintf(stderr, "mhe: --resume %s: %s\n", o->resume, st.err);
        free(buf);
        return 0;
    }
    {
        if (!mhe_st_meta(&st, "step")) {
            fprintf(stderr, "mhe: --resume %s: a weights-only file (no optimizer state, step or RNG); to train these weights further, "
                            "give --model %s\n", o->resume, o->resume);
            mhe_st_free(&st);
            free(buf);
            return 0;
        }
        for (i = 0; mhe_train_config_field(&tc, i, &k, v, sizeof v); i++) {
            char key[64];
            const char *val;
            snprintf(key, sizeof key, "train.%s", k);
            val = mhe_st_meta(&st, key);
            /* a flag given now overrides a saved setting, but a corrupt one is refused all the same,
               never replaced by the default */
            if (val && mhe_train_config_set(o->tc_given[i] ? &tc : &o->tc, k, val, err) != MHE_OK) {
                fprintf(stderr, "mhe: --resume %s: saved train setting %s='%s': %s\n", o->resume, key, val, err);
                mhe_st_free(&st);
                free(buf);
                return 0;
            }
        }
        i = resume_task(o, &st);
        mhe_st_free(&st);
        if (!i) { free(buf); return 0; }
    }
    free(buf);
    return 1;
}

/* the model to train further: the --resume checkpoint (and its train settings) or --model */
static int load_model_to_train(opts *o, mhe_model *m) {
    return load_model(o->resume ? o->resume : o->model, m);
}

static int new_model(const opts *o, mhe_model *m) {
    if (mhe_model_init(m, &o->cfg, o->tc.seed, NULL) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 0; }
    if (o->tok && mhe_model_set_bpe(m, o->tok) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); mhe_model_free(m); return 0; }
    return 1;
}

/* a resumed run that already reached --steps would save its state unchanged and print a zero loss */
static int steps_left(const opts *o, const mhe_trainer *t) {
    if (!o->resume || t->step < o->tc.steps) return 1;
    fprintf(stderr, "mhe: --resume %s is at step %d and steps is %d: nothing to train (give --steps above %d)\n", o->resume, t->step,
            o->tc.steps, t->step);
    return 0;
}

/* a trainer for m; --resume restores its AdamW moments, RNG and step */
static int start_trainer(mhe_trainer *t, mhe_model *m, const opts *o) {
    if (mhe_trainer_init(t, m, &o->tc) != MHE_OK) { fprintf(stderr, "mhe: %s\n", t->err); return 0; }
    if (o->resume && mhe_trainer_load(t, o->resume) != MHE_OK) {
        fprintf(stderr, "mhe: %s: %s\n", o->resume, t->err);
        mhe_trainer_free(t);
        return 0;
    }
    if (!steps_left(o, t)) { mhe_trainer_free(t); return 0; }
    return 1;
}

/* ---- the training loop, one for every task ---- */

typedef struct train_run train_run;

/* what differs between the tasks; each keeps its data in run->data */
typedef struct {
    int (*begin)(train_run *r);               /* checks that need the trainer, then the header; 0 stops */
    mhe_status (*step)(train_run *r);
    mhe_status (*validate)(train_run *r);     /* keeps the result for print_val */
    void (*print_val)(const train_run *r);    /* the rest of a "step N  " validation line */
    void (*print_final)(const train_run *r);  /* NULL, or the line before "wrote FILE" */
    int tokens_per_s;                         /* the progress line shows tokens/s */
    int on_device;                            /* --device cuda can train it */
    const char *name;                         /* --task NAME, saved in the checkpoint */
} train_task;

struct train_run {
    const opts *o;
    mhe_model *m;
    mhe_trainer *t;           /* the CPU trainer, or the host half of the CUDA one */
    mhe_trainer cpu;
#ifdef MHE_CUDA
    mhe_cuda_model dev;       /* --device cuda: the model and trainer on the GPU */
    mhe_cuda_trainer gpu;
#endif
    const train_task *task;
    void *data;               /* the task's own: lm_data, cls_data or sr_data */
    int has_valid, tty, first_step;
    double t0;
    mhe_out dump;             /* --dump-batches: the file being written (dump.f NULL: none) */
    int saved_step;           /* the step of the last checkpoint this run wrote (-1: none) */
};

/* logs and validations come every N steps and at the last */
static int due(int step, int every, int last) { return step % every == 0 || step == last; }

static void print_progress(const train_run *r) {
    const mhe_train_config *tc = &r->o->tc;
    double el = now_s() - r->t0, per = el / (r->t->step - r->first_step);
    printf("%sstep %6d/%d  loss %.4f  lr %.2e  ", r->tty ? "\r" : "", r->t->step, tc->steps, r->t->last_loss, r->t->last_lr);
    if (r->task->tokens_per_s) printf("%7.0f tok/s  ", (double)(r->t->step - r->first_step) * tc->batch * tc->seq_len / el);
    printf("%5.0f ms/step  left %4.0fs%s", per * 1e3, per * (tc->steps - r->t->step), r->tty ? "" : "\n");
    fflush(stdout);
}

/* --device cuda: the device's weights and moments into the host model and trainer */
static int sync_device(train_run *r) {
#ifdef MHE_CUDA
    if (r->o->cuda && mhe_cuda_trainer_sync(&r->gpu) != MHE_OK) { fprintf(stderr, "\nmhe: %s\n", r->dev.err); return 0; }
#else
    (void)r;
#endif
    return 1;
}

static int validate(train_run *r) {
    if (!sync_device(r)) return 0;
    if (r->task->validate(r) != MHE_OK) { fprintf(stderr, "\nmhe: validation: %s\n", r->m->err); return 0; }
    if (!r->o->quiet) {
        printf("%sstep %6d  ", r->tty ? "\n" : "", r->t->step);
        r->task->print_val(r);
    }
    return 1;
}

static int save_checkpoint(train_run *r) {
    if (!sync_device(r)) return 0;
    if (mhe_checkpoint_save(r->m, r->t, r->o->out) == MHE_OK) { r->saved_step = r->t->step; return 1; }
    fprintf(stderr, "\nmhe: %s\n", r->t->err);
    return 0;
}

/* ---- --dump-batches FILE: the batches the trainer draws, for a lockstep replay ----
   Text header lines, "end", then one little-endian record per step:
     int32 step; float32 loss, lr, grad_norm (after the step, as mhe computed them);
     int32 tokens[B*T]; int32 targets[B*T] (< 0: not scored); int32 src[B*Ts] (arch=encdec only).
   Header: "mhe-batches 1", batch, seq_len, src_len (the Ts of src), steps (records),
   first_step, corpus_tokens and corpus_fnv1a64 (FNV-1a 64 of the training tokens as
   int32 LE, so a replay can refuse another corpus), then model.KEY=VALUE for every
   model field (a replay refuses another model) and train.KEY=VALUE for every train
   field (the schedule and AdamW settings the replay uses). Written to a temporary name and
   renamed when training ends; a failed run leaves no dump. */

static uint64_t fnv1a64_tokens(const int *d, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    size_t i;
    int k;
    for (i = 0; i < n; i++)
        for (k = 0; k < 4; k++) { h ^= (uint64_t)(((uint32_t)d[i] >> (8 * k)) & 0xFF); h *= 1099511628211ULL; }
    return h;
}

static void put_i32s(mhe_out *w, const int *v, size_t n) {
    unsigned char b[4];
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t x = (uint32_t)v[i];
        b[0] = (unsigned char)x; b[1] = (unsigned char)(x >> 8); b[2] = (unsigned char)(x >> 16); b[3] = (unsigned char)(x >> 24);
        mhe_out_write(w, b, 4);
    }
}

static void put_f32(mhe_out *w, float v) {
    int x;
    memcpy(&x, &v, 4);
    put_i32s(w, &x, 1);
}

static int dump_src_len(const train_run *r) {
    const mhe_train_config *tc = &r->o->tc;
    return r->m->cfg.arch == MHE_ARCH_ENCDEC ? (tc->src_len > 0 ? tc->src_len : tc->seq_len) : 0;
}

static void dump_abandon(train_run *r) {
    if (r->dump.f) mhe_out_discard(&r->dump);
    r->dump.f = NULL;
}

static int dump_open(train_run *r, const int *corpus, size_t n) {
    const opts *o = r->o;
    const mhe_config *c = &r->m->cfg;
    const char *key;
    char val[512];
    int i;
    FILE *f;
    if (!o->dump_batches) return 1;
    if (c->embedding != MHE_EMB_VOCAB) {
        fprintf(stderr, "mhe: --dump-batches: a hash-embedding model's batches need its word features; only vocabulary models are dumped\n");
        return 0;
    }
    if (!out_open(&r->dump, o->dump_batches)) return 0;
    f = r->dump.f;
    fprintf(f, "mhe-batches 1\nbatch %d\nseq_len %d\nsrc_len %d\nsteps %d\nfirst_step %d\n", o->tc.batch, o->tc.seq_len,
            dump_src_len(r), o->tc.steps - r->t->step, r->t->step);
    fprintf(f, "corpus_tokens %zu\ncorpus_fnv1a64 %016llx\n", n, (unsigned long long)fnv1a64_tokens(corpus, n));
    for (i = 0; mhe_config_field(c, i, &key, val, sizeof val); i++) {
        if (strchr(val, '\n')) { fprintf(stderr, "mhe: --dump-batches: model field %s holds a newline\n", key); dump_abandon(r); return 0; }
        fprintf(f, "model.%s=%s\n", key, val);
    }
    for (i = 0; mhe_train_config_field(&o->tc, i, &key, val, sizeof val); i++) fprintf(f, "train.%s=%s\n", key, val);
    fprintf(f, "end\n");
    return 1;
}

/* one step's record; a failed write shows at the commit (ferror), which names the reason */
static void dump_step(train_run *r) {
    const mhe_trainer *t = r->t;
    size_t BT = (size_t)r->o->tc.batch * r->o->tc.seq_len, BTs = (size_t)r->o->tc.batch * dump_src_len(r);
    int step = t->step - 1;
    if (!r->dump.f) return;
    put_i32s(&r->dump, &step, 1);
    put_f32(&r->dump, t->last_loss);
    put_f32(&r->dump, t->last_lr);
    put_f32(&r->dump, t->last_grad_norm);
    put_i32s(&r->dump, t->batch_tokens, BT);
    put_i32s(&r->dump, t->batch_targets, BT);
    put_i32s(&r->dump, t->batch_src, BTs);
}

static int dump_close(train_run *r) {
    if (!r->dump.f) return 1;
    if (!out_commit(&r->dump)) { r->dump.f = NULL; return 0; }
    r->dump.f = NULL;
    if (!r->o->quiet) printf("wrote %s (the batches of %d steps)\n", r->o->dump_batches, r->o->tc.steps - r->first_step);
    return 1;
}

/* a signal asked the run to stop (stop_signal): the checkpoint of the steps
   done, unless this run just wrote it, and how to go on; the exit status */
static int stop_training(train_run *r) {
    const opts *o = r->o;
    int sig = stop_signal;
    if (r->saved_step != r->t->step && !save_checkpoint(r)) {
        fprintf(stderr, "mhe: stopped by %s at step %d of %d; the checkpoint was not written (above)\n", signal_name(sig), r->t->step,
                o->tc.steps);
        return exit_status_of(sig);
    }
    if (r->tty) printf("\n");   /* ends the progress line */
    fflush(stdout);
    if (r->t->step >= o->tc.steps) {
        fprintf(stderr, "mhe: %s arrived as the last checkpoint was written: %s holds all %d steps\n", signal_name(sig), o->out, r->t->step);
        return exit_status_of(sig);
    }
    fprintf(stderr, "mhe: stopped by %s at step %d of %d: %s holds the run (weights, AdamW moments, RNG, step, task %s)\n"
                    "mhe: to continue it: mhe train --resume %s --out %s --data %s%s%s\n", signal_name(sig), r->t->step, o->tc.steps,
            o->out, r->task->name, o->out, o->out, o->data, o->valid ? " --valid " : "", o->valid ? o->valid : "");
    return exit_status_of(sig);
}

/* --device cuda: the last step's loss and gradient norm, which the device trainer keeps on the
   device until asked (a non-finite gradient norm shows here) */
static mhe_status step_stats(train_run *r) {
#ifdef MHE_CUDA
    if (r->o->cuda) return mhe_cuda_trainer_stats(&r->gpu);
#else
    (void)r;
#endif
    return MHE_OK;
}

/* steps to tc.steps with progress, validation and checkpoints; 0 on failure
   (message printed), 1 when done, else the exit status after a signal */
static int train_steps(train_run *r) {
    const mhe_train_config *tc = &r->o->tc;
    int rc;
    r->t0 = now_s();
    r->first_step = r->t->step;
    stop_asks = 1;
    while (r->t->step < tc->steps && !stop_signal) {
        mhe_status s = r->task->step(r);
        if (s == MHE_OK && ((!r->o->quiet && due(r->t->step, tc->log_every, tc->steps)) || r->dump.f)) s = step_stats(r);
        if (s != MHE_OK) { fprintf(stderr, "\nmhe: step %d: %s (%s)\n", r->t->step, r->t->err, mhe_status_str(s)); stop_asks = 0; return 0; }
        dump_step(r);
        if (!r->o->quiet && due(r->t->step, tc->log_every, tc->steps)) print_progress(r);
        if (stop_signal) break;   /* the validation can wait for the resumed run */
        if (r->has_valid && tc->eval_every > 0 && due(r->t->step, tc->eval_every, tc->steps) && !validate(r)) { stop_asks = 0; return 0; }
        if (tc->save_every > 0 && r->t->step % tc->save_every == 0 && r->t->step < tc->steps && !save_checkpoint(r)) { stop_asks = 0; return 0; }
    }
    if (!stop_signal && !save_checkpoint(r)) { stop_asks = 0; return 0; }
    rc = stop_signal ? stop_training(r) : 1;
    stop_asks = 0;
    return rc;
}

static void print_end(const train_run *r) {
    const mhe_model *m = r->m;
    if (r->tty) printf("\n");   /* ends the progress line */
    if (r->task->print_final) r->task->print_final(r);
    printf("wrote %s\n", r->o->out);
    printf("peak memory: %.1f MB resident (library: %.1f MB parameters+gradients, %.1f MB activations, %.1f MB AdamW)\n",
           peak_rss_mb(), m->bytes_params / 1e6, m->bytes_acts / 1e6, 2.0 * m->n_params * 4 / 1e6);
#ifdef MHE_CUDA
    if (r->o->cuda)
        printf("device memory: %.1f MB (parameters, gradients, activations) + %.1f MB AdamW\n", r->dev.device_bytes / 1e6,
               2.0 * m->n_params * 4 / 1e6);
#endif
}

#ifdef MHE_CUDA
/* the model and trainer on the GPU, as mhe train and mhe compare --device cuda
   run them (the host trainer keeps step, RNG and, when synced, moments);
   resume: a checkpoint to continue. 0: *where (the flag or the file) and err say why */
static int device_trainer(mhe_cuda_model *dev, mhe_cuda_trainer *gpu, mhe_model *m, const mhe_train_config *tc, int precision,
                          const char *resume, FILE *say, const char **where, char *err) {
    *where = "--device cuda";
    if (!device_model(dev, m, precision, say, err)) return 0;
    if (mhe_cuda_trainer_init(gpu, dev, tc) != MHE_OK) {
        snprintf(err, MHE_ERR_LEN, "%s", gpu->host.err);
        mhe_cuda_model_free(dev);
        return 0;
    }
    if (resume && (mhe_trainer_load(&gpu->host, resume) != MHE_OK || mhe_cuda_trainer_upload(gpu) != MHE_OK)) {
        *where = resume;
        cmp_err(err, "%s%s", gpu->host.err, dev->err);   /* vsnprintf inside: g++ -Werror (nvcc) refuses a snprintf that may cut the pair */
        mhe_cuda_trainer_free(gpu);
        mhe_cuda_model_free(dev);
        return 0;
    }
    gpu->deferred = 1; /* no blocking copy in a step (a dump waits for each step's loss after it) */
    gpu->graph = 1;    /* a step of fixed shapes as one CUDA graph launch */
    return 1;
}
#endif

/* --device cuda: the model and trainer on the GPU */
static int start_device(train_run *r) {
#ifdef MHE_CUDA
    const char *where;
    char err[MHE_ERR_LEN];
    if (!r->task->on_device) { fprintf(stderr, "mhe: --device cuda trains --task lm, cls and sr only\n"); return 0; }
    if (!device_trainer(&r->dev, &r->gpu, r->m, &r->o->tc, r->o->precision, r->o->resume, r->o->quiet ? NULL : stdout, &where, err)) {
        fprintf(stderr, "mhe: %s: %s\n", where, err);
        return 0;
    }
    r->t = &r->gpu.host;
    if (!steps_left(r->o, r->t)) {
        mhe_cuda_trainer_free(&r->gpu);
        mhe_cuda_model_free(&r->dev);
        return 0;
    }
    return 1;
#else
    (void)r;
    return 0;
#endif
}


static void stop_device(train_run *r) {
#ifdef MHE_CUDA
    if (r->gpu.graph_error != cudaSuccess) /* the steps ran, kernel by kernel */
        fprintf(stderr, "mhe: --device cuda: the driver refused the step's CUDA graph (%s); the steps launched each kernel\n",
                cudaGetErrorString(r->gpu.graph_error));
    else if (!r->o->quiet && r->gpu.graph_builds > 0) /* what make gpu-check reads: the default path ran */
        printf("device graph: %ld built, %ld steps launched as one, %ld nodes patched\n", r->gpu.graph_builds,
               r->gpu.graph_launches, r->gpu.graph_patches);
    mhe_cuda_trainer_free(&r->gpu);
    mhe_cuda_model_free(&r->dev);
#else
    (void)r;
#endif
}

/* trains m on the task's data and writes the checkpoint; returns the exit status */
static int run_training(const opts *o, mhe_model *m, const train_task *task, void *data, int has_valid) {
    train_run r;
    int ok;
    memset(&r, 0, sizeof r);
    r.o = o; r.m = m; r.task = task; r.data = data; r.has_valid = has_valid; r.tty = isatty(1);
    if (o->cuda) {
        if (!start_device(&r)) return 1;
    } else {
        if (!start_trainer(&r.cpu, m, o)) return 1;
        r.t = &r.cpu;
    }
    snprintf(r.t->task, sizeof r.t->task, "%s", task->name);
    r.saved_step = -1;
    ok = task->begin(&r) ? train_steps(&r) : 0;
    if (ok == 1 && !dump_close(&r)) ok = 0;
    dump_abandon(&r);   /* a failed or stopped run leaves no dump */
    if (ok == 1 && !o->quiet) print_end(&r);
    if (o->cuda) stop_device(&r);
    else mhe_trainer_free(&r.cpu);
    return ok == 1 ? 0 : ok == 0 ? 1 : ok;
}

/* ---- --task lm: the next byte (decoder), masked bytes (encoder), a continuation (encdec) ---- */

typedef struct { int *train, *valid; size_t n_train, n_valid; float val_loss; } lm_data;

/* the bytes of one window (mhe's lm span): seq_len for an encoder (masked
   LM), src_len + seq_len for encdec, seq_len + 1 (the next byte) for a decoder */
static size_t lm_window(const mhe_model *m, const mhe_train_config *tc) {
    size_t T = (size_t)tc->seq_len, Ts = (size_t)(tc->src_len > 0 ? tc->src_len : tc->seq_len);
    return m->cfg.arch == MHE_ARCH_ENCODER ? T : m->cfg.arch == MHE_ARCH_ENCDEC ? Ts + T : T + 1;
}

static const char *lm_objective(const mhe_model *m) {
    return m->cfg.arch == MHE_ARCH_ENCODER ? "masked LM (arch=encoder)" : m->cfg.arch == MHE_ARCH_ENCDEC ? "encoder-decoder (src_len + seq_len)"
                                                                                                       : "next byte (arch=decoder)";
}

/* preflight: the model and both files suit the task at these lengths */
static int lm_begin(train_run *r) {
    const lm_data *d = (const lm_data *)r->data;
    const mhe_train_config *tc = &r->o->tc;
    size_t need = lm_window(r->m, tc);
    if (r->m->cfg.token_head == MHE_HEAD_SR) {
        fprintf(stderr, "mhe: --task lm: this model has the Shuffle+Random head (token_head=sr): train it with --task sr\n");
        return 0;
    }
    if (d->n_train < need) {
        fprintf(stderr, "mhe: --data %s: %zu tokens, one training window of the %s needs %zu (seq_len %d)\n", r->o->data, d->n_train,
                lm_objective(r->m), need, tc->seq_len);
        return 0;
    }
    if (d->valid && d->n_valid < need) {
        fprintf(stderr, "mhe: --valid %s: %zu tokens, one validation window of the %s needs %zu (seq_len %d): nothing trained\n",
                r->o->valid, d->n_valid, lm_objective(r->m), need, tc->seq_len);
        return 0;
    }
    if (!dump_open(r, d->train, d->n_train)) return 0;
    if (r->o->quiet) return 1;
    describe(r->m);
    printf("data: %zu train tokens, %zu valid tokens; unigram entropy %.3f nats\n", d->n_train, d->n_valid,
           mhe_unigram_entropy(d->train, d->n_train, r->m->cfg.vocab_size));
    printf("training %d steps of %d x %d tokens%s\n", tc->steps, tc->batch, tc->seq_len, r->t->step ? " (resumed)" : "");
    return 1;
}

static mhe_status lm_step(train_run *r) {
    const lm_data *d = (const lm_data *)r->data;
#ifdef MHE_CUDA
    if (r->o->cuda) return mhe_cuda_trainer_step(&r->gpu, d->train, d->n_train);
#endif
    return mhe_trainer_step(r->t, d->train, d->n_train);
}

static mhe_status lm_validate(train_run *r) {
    lm_data *d = (lm_data *)r->data;
    const mhe_train_config *tc = &r->o->tc;
    return mhe_evaluate_s2s(r->m, d->valid, d->n_valid, tc->batch, tc->src_len, tc->seq_len, tc->eval_batches, &d->val_loss);
}

static void lm_print_val(const train_run *r) {
    const lm_data *d = (const lm_data *)r->data;
    printf("val loss %.4f  val ppl %.3f\n", d->val_loss, mhe_perplexity(d->val_loss));
}

static void lm_print_final(const train_run *r) {
    const lm_data *d = (const lm_data *)r->data;
    printf("final train loss %.4f", r->t->last_loss);
    if (d->valid) printf(", val loss %.4f (ppl %.3f)", d->val_loss, mhe_perplexity(d->val_loss));
    printf("\n");
}

static const train_task lm_task = { lm_begin, lm_step, lm_validate, lm_print_val, lm_print_final, 1, 1, "lm" };

static int train_lm(opts *o) {
    lm_data d;
    mhe_model m;
    int rc = 1;
    memset(&d, 0, sizeof d);
    if (!o->data) { fprintf(stderr, "mhe: no corpus given (--data FILE)\n"); return 1; }
    /* the model first: its tokenizer (if any) reads the texts */
    if (!(o->resume || o->model ? load_model_to_train(o, &m) : new_model(o, &m))) return 1;
    if (bytes_fit(&m, "--data") && load_corpus(o->data, m.bpe, &d.train, &d.n_train) &&
        (!o->valid || load_corpus(o->valid, m.bpe, &d.valid, &d.n_valid)))
        rc = run_training(o, &m, &lm_task, &d, d.valid != NULL);
    mhe_model_free(&m);
    free(d.train); free(d.valid);
    return rc;
}

/* ---- --task cls: an encoder's classification head on labelled texts ---- */

typedef struct {
    mhe_text_set train, valid;
    mhe_lexicon x, xtr;   /* the word types of both sets; of the training set alone */
    mhe_word_feats f;
    int words;            /* texts as words, not bytes */
    mhe_cls_metrics val;
} cls_data;

static void cls_data_free(cls_data *d) {
    mhe_text_set_free(&d->train);
    mhe_text_set_free(&d->valid);
    mhe_word_feats_free(&d->f);
    mhe_lexicon_free(&d->x);
    mhe_lexicon_free(&d->xtr);
}

/* the two labelled sets, as bytes, BPE tokens of bpe, or words of x (xtr: the training types alone) */
static int load_sets(const opts *o, cls_data *d, const mhe_bpe *bpe) {
    char err[MHE_ERR_LEN];
    mhe_status s = d->words ? mhe_text_set_load_words(&d->train, &d->x, o->data, NULL, err) : mhe_text_set_load(&d->train, o->data, NULL, err);
    if (s == MHE_OK && bpe) s = mhe_text_set_bpe(&d->train, bpe, err);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    if (d->words && !lex_copy(&d->xtr, &d->x)) return 0;
    if (o->valid) {
        s = d->words ? mhe_text_set_load_words(&d->valid, &d->x, o->valid, NULL, err) : mhe_text_set_load(&d->valid, o->valid, NULL, err);
        if (s == MHE_OK && bpe) s = mhe_text_set_bpe(&d->valid, bpe, err);
        if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    }
    return 1;
}

static int cls_classes(const cls_data *d) { return d->train.n_classes > d->valid.n_classes ? d->train.n_classes : d->valid.n_classes; }

/* fine-tuning: a new head of K classes on the loaded weights; frees m on failure */
static int add_cls_head(const opts *o, mhe_model *m, int K) {
    mhe_model pre = *m;
    mhe_config c = m->cfg;
    int copied;
    mhe_status s;
    c.n_classes = K;
    s = mhe_model_init_from(m, &c, &pre, o->tc.seed, NULL, &copied);
    if (s != MHE_OK) fprintf(stderr, "mhe: %s\n", m->err);
    mhe_model_free(&pre);
    if (s == MHE_OK && !o->quiet) printf("fine-tuning %s: %d tensors loaded, a new classification head of %d classes\n", o->model, copied, K);
    return s == MHE_OK;
}

/* a loaded model, and the sets read as its tokens are (words for a word model) */
static int cls_loaded_model(opts *o, cls_data *d, mhe_model *m) {
    if (!load_model_to_train(o, m)) return 0;
    d->words = word_model(m);
    if (!bytes_fit(m, "--data") || !load_sets(o, d, m->bpe)) { mhe_model_free(m); return 0; }
    if (m->cfg.n_classes == 0 && !o->resume) return add_cls_head(o, m, cls_classes(d));
    return 1;
}

/* a new model sized by the sets: n_classes from their labels, words for hash embeddings and --words 1 */
static int cls_new_model(opts *o, cls_data *d, mhe_model *m) {
    d->words = o->words || o->cfg.embedding != MHE_EMB_VOCAB;
    if (!load_sets(o, d, o->tok)) return 0;
    if (o->cfg.n_classes == 0) o->cfg.n_classes = cls_classes(d);
    if (d->words && !model_given(o, "token_head") && o->cfg.embedding != MHE_EMB_VOCAB) o->cfg.token_head = MHE_HEAD_SR;
    if (!new_model(o, m)) return 0;
    if (d->words && !word_state(m, &d->xtr, o->data)) { mhe_model_free(m); return 0; }
    return 1;
}

/* the model has a head; word sets get the features of every word type */
static int cls_ready(const opts *o, cls_data *d, mhe_model *m) {
    if (m->cfg.n_classes < 1) { fprintf(stderr, "mhe: --task cls needs a model with a classification head (arch=encoder, n_classes > 0)\n"); return 0; }
    if (d->train.n_classes > m->cfg.n_classes || d->valid.n_classes > m->cfg.n_classes) {
        int tr = d->train.n_classes > m->cfg.n_classes;
        fprintf(stderr, "mhe: %s %s: labels up to %d, the model's head has n_classes %d (labels 0..%d)\n", tr ? "--data" : "--valid",
                tr ? o->data : o->valid, (tr ? d->train.n_classes : d->valid.n_classes) - 1, m->cfg.n_classes, m->cfg.n_classes - 1);
        return 0;
    }
    if (d->words) {
        if (!feats(m, &d->x, &d->f)) return 0;
        d->train.words = d->valid.words = &d->f;
    }
    return 1;
}

static int cls_begin(train_run *r) {
    const cls_data *d = (const cls_data *)r->data;
    if (r->o->quiet) return 1;
    describe(r->m);
    printf("data: %d training examples, %d validation examples, %d classes%s\n", d->train.n, d->valid.n, r->m->cfg.n_classes,
           d->words ? " (word tokens)" : "");
    return 1;
}

static mhe_status cls_step(train_run *r) {
    const cls_data *d = (const cls_data *)r->data;
#ifdef MHE_CUDA
    if (r->o->cuda) return mhe_cuda_trainer_step_cls(&r->gpu, &d->train);
#endif
    return mhe_trainer_step_cls(r->t, &d->train);
}

static mhe_status cls_validate(train_run *r) {
    cls_data *d = (cls_data *)r->data;
    return mhe_evaluate_cls(r->m, &d->valid, r->o->tc.batch, r->o->tc.seq_len, &d->val);
}

static void cls_print_val(const train_run *r) { print_cls("val", &((const cls_data *)r->data)->val); }

static const train_task cls_task = { cls_begin, cls_step, cls_validate, cls_print_val, NULL, 0, 1, "cls" };

/* mhe train --task cls: the classification head of an encoder on labelled texts
   (bytes, or words for word models and --words 1); a loaded model without a
   head gets one (fine-tuning), its other weights kept */
static int train_cls(opts *o) {
    cls_data d;
    mhe_model m;
    int rc = 1;
    memset(&d, 0, sizeof d);
    mhe_lexicon_init(&d.x, NULL);
    mhe_lexicon_init(&d.xtr, NULL);
    if (!o->data) { fprintf(stderr, "mhe: no training data given (--data FILE)\n"); return 1; }
    if (o->resume || o->model ? cls_loaded_model(o, &d, &m) : cls_new_model(o, &d, &m)) {
        if (cls_ready(o, &d, &m)) rc = run_training(o, &m, &cls_task, &d, d.valid.n != 0);
        mhe_model_free(&m);
    }
    cls_data_free(&d);
    return rc;
}

/* ---- --task sr: Shuffle+Random pre-training on the words of a text ---- */

typedef struct {
    mhe_lexicon x, xtr;          /* the word types of both texts; of the training text alone */
    mhe_word_feats ftr, fall;    /* the features of xtr and of x */
    int *train, *valid;
    size_t n_train, n_valid;
    mhe_cls_metrics val;
} sr_data;

static void sr_data_free(sr_data *d) {
    mhe_word_feats_free(&d->ftr);
    mhe_word_feats_free(&d->fall);
    mhe_lexicon_free(&d->x);
    mhe_lexicon_free(&d->xtr);
    free(d->train); free(d->valid);
}

/* a loaded model must take words; a new one is an encoder with the S+R head unless flags say otherwise */
static int sr_model(opts *o, mhe_model *m) {
    if (o->resume || o->model) {
        if (!load_model_to_train(o, m)) return 0;
        if (m->cfg.embedding == MHE_EMB_VOCAB && m->vocab.n == 0) {
            fprintf(stderr, "mhe: --task sr takes words: this model has byte tokens (no word vocabulary)\n");
            mhe_model_free(m);
            return 0;
        }
        return 1;
    }
    if (!model_given(o, "arch")) o->cfg.arch = MHE_ARCH_ENCODER;
    if (!model_given(o, "token_head")) o->cfg.token_head = MHE_HEAD_SR;
    return new_model(o, m);
}

/* the S+R head, the word state the training text gives, the features, the validation words */
static int sr_ready(const opts *o, sr_data *d, mhe_model *m) {
    if (m->cfg.token_head != MHE_HEAD_SR) { fprintf(stderr, "mhe: --task sr needs the S+R head (token_head=sr); this model has an LM head\n"); return 0; }
    if (!word_state(m, &d->xtr, o->data)) return 0;
    /* training features cover the training types, so no validation word is drawn as a random word */
    if (!feats(m, &d->xtr, &d->ftr)) return 0;
    return !o->valid || (read_words(o->valid, &d->x, &d->valid, &d->n_valid) && feats(m, &d->x, &d->fall));
}

static int sr_begin(train_run *r) {
    const sr_data *d = (const sr_data *)r->data;
    const opts *o = r->o;
    if (d->n_train < (size_t)o->tc.seq_len) {
        fprintf(stderr, "mhe: --data %s: %zu word tokens, one training window needs %d (seq_len %d)\n", o->data, d->n_train, o->tc.seq_len,
                o->tc.seq_len);
        return 0;
    }
    if (o->valid && d->n_valid < (size_t)o->tc.seq_len) {
        fprintf(stderr, "mhe: --valid %s: %zu word tokens, one validation window needs %d (seq_len %d): nothing trained\n", o->valid,
                d->n_valid, o->tc.seq_len, o->tc.seq_len);
        return 0;
    }
    if (o->quiet) return 1;
    describe(r->m);
    printf("data: %zu train word tokens (%d types), %zu valid word tokens; S+R: shuffle %.0f%%, replace %.0f%% of the rest\n",
           d->n_train, d->xtr.n, d->n_valid, 100.0 * o->tc.sr_prob, 100.0 * o->tc.sr_prob);
    return 1;
}

static mhe_status sr_step(train_run *r) {
    const sr_data *d = (const sr_data *)r->data;
#ifdef MHE_CUDA
    if (r->o->cuda) return mhe_cuda_trainer_step_sr(&r->gpu, d->train, d->n_train, &d->ftr);
#endif
    return mhe_trainer_step_sr(r->t, d->train, d->n_train, &d->ftr);
}

static mhe_status sr_validate(train_run *r) {
    sr_data *d = (sr_data *)r->data;
    const mhe_train_config *tc = &r->o->tc;
    return mhe_evaluate_sr(r->m, d->valid, d->n_valid, &d->fall, tc->batch, tc->seq_len, tc->eval_batches, tc->sr_prob, &d->val);
}

static void sr_print_val(const train_run *r) { print_sr("val ", &((const sr_data *)r->data)->val); }

static const train_task sr_task = { sr_begin, sr_step, sr_validate, sr_print_val, NULL, 1, 1, "sr" };

static int train_sr(opts *o) {
    sr_data d;
    mhe_model m;
    int rc = 1;
    memset(&d, 0, sizeof d);
    mhe_lexicon_init(&d.x, NULL);
    mhe_lexicon_init(&d.xtr, NULL);
    if (read_words(o->data, &d.x, &d.train, &d.n_train) && lex_copy(&d.xtr, &d.x) && sr_model(o, &m)) {
        if (sr_ready(o, &d, &m)) rc = run_training(o, &m, &sr_task, &d, d.valid != NULL);
        mhe_model_free(&m);
    }
    sr_data_free(&d);
    return rc;
}

/* the train settings of the run (flags, then the --resume file's), checked
   before any data is read */
static int train_settings_valid(const opts *o) {
    char err[MHE_ERR_LEN];
    if (mhe_train_config_validate(&o->tc, err) == MHE_OK) return 1;
    if (o->resume) fprintf(stderr, "mhe: --resume %s: train settings (those saved there unless a flag gives one): %s\n", o->resume, err);
    else fprintf(stderr, "mhe: train settings: %s\n", err);
    return 0;
}

static int cmd_train(int argc, char **argv) {
    opts o;
    int rc, i;
    if (!command_opts("train", argc, argv, &o, &rc)) return rc;
    /* a loaded model keeps its config: a model flag would be silently ignored */
    if (o.model || o.resume) {
        const char *k;
        char v[512];
        for (i = 0; mhe_config_field(&o.cfg, i, &k, v, sizeof v); i++)
            if (o.model_given[i] || o.config_path) {
                if (o.config_path) fprintf(stderr, "mhe: --config sets a new model's fields, ");
                else fprintf(stderr, "mhe: --%s sets a new model's field, ", k);
                fprintf(stderr, "but %s %s brings its own config: refused\n", o.resume ? "--resume" : "--model", o.resume ? o.resume : o.model);
                return 2;
            }
    }
    if ((o.model || o.resume) && o.words_s) {   /* a loaded model already takes words or bytes */
        fprintf(stderr, "mhe: --words chooses a new model's tokens, but %s %s brings its own: refused\n", o.resume ? "--resume" : "--model",
                o.resume ? o.resume : o.model);
        return 2;
    }
    if ((o.model || o.resume) && o.tokenizer) {   /* a loaded model keeps its tokens */
        fprintf(stderr, "mhe: --tokenizer chooses a new model's tokens, but %s %s brings its own: refused\n", o.resume ? "--resume" : "--model",
                o.resume ? o.resume : o.model);
        return 2;
    }
    if (o.resume && o.model) { fprintf(stderr, "mhe: give --model or --resume, not both\n"); return 2; }
    if (!read_tokenizer(&o)) return 1;
    /* before the data is read and the first step taken */
    if (!check_output(&o, o.out, 1)) return 1;
    if (o.resume && !resume_settings(&o)) return 1;
    if (!train_settings_valid(&o)) return 1;
    if (o.dump_batches) {
        if (o.task && strcmp(o.task, "lm") != 0) { fprintf(stderr, "mhe: --dump-batches records --task lm batches only\n"); return 2; }
        if (same_file(o.dump_batches, o.out)) { fprintf(stderr, "mhe: --dump-batches %s is the --out file: refused\n", o.dump_batches); return 2; }
        if (!check_output(&o, o.dump_batches, 0)) return 1;
    }
    if (o.task && strcmp(o.task, "cls") == 0) return train_cls(&o);
    if (o.task && strcmp(o.task, "sr") == 0) return train_sr(&o);
    return train_lm(&o);
}

/* ---- eval --------------------------------------------------------------- */

/* PREFIX.csv, PREFIX.svg and PREFIX_maps.svg of mhe eval --indicators */
static int write_indicators(const opts *o, mhe_model *m, const int *data, size_t n) {
    mhe_indicators ind;
    const mhe_indicators *one = &ind;
    const char *label = o->model;
    static const char *suffix[3] = { ".csv", ".svg", "_maps.svg" };
    char path[3][MHE_PATH_LEN];
    mhe_out w[3];
    int i, k, ok = 1, n_open = 0, len = o->map_len > o->tc.seq_len ? o->tc.seq_len : (int)o->map_len, *tok;
    if (m->cfg.arch == MHE_ARCH_ENCDEC) { fprintf(stderr, "mhe: --indicators: decoder and encoder models only\n"); return 1; }
    if (mhe_indicators_eval(m, data, n, o->tc.batch, o->tc.seq_len, o->batches, &ind) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 1; }
    printf("indicators over %lld sequences of %d bytes (reference path; layer means over heads):\n", (long long)ind.sequences, o->tc.seq_len);
    printf("  layer %-12s", "kind");
    for (i = 0; i < MHE_IND_COUNT; i++) printf(" %12s", mhe_ind_name(i));
    printf("\n");
    for (i = 0; i < ind.n_layers; i++) {
        printf("  %5d %-12s", i, mhe_attn_kind_name(ind.kind[i]));
        for (k = 0; k < MHE_IND_COUNT; k++) {
            if (ind.has_map[i]) printf(" %12.4f", mhe_indicator(&ind, i, -1, k));
            else printf(" %12s", "-");
        }
        printf("\n");
    }
    /* three files, each atomic; written in full before any replaces its old version */
    tok = (int *)malloc((size_t)(n < (size_t)len ? (len = (int)n) : len) * sizeof(int));
    if (!tok) { fprintf(stderr, "mhe: out of memory\n"); mhe_indicators_free(&ind); return 1; }
    for (i = 0; i < len; i++) tok[i] = data[i];
    for (k = 0; k < 3 && ok; k++) {
        if (snprintf(path[k], sizeof path[k], "%s%s", o->indicators, suffix[k]) >= (int)sizeof path[k]) {
            fprintf(stderr, "mhe: --indicators %s: path too long\n", o->indicators);
            ok = 0;
        } else if ((ok = out_open(&w[k], path[k])) != 0) n_open++;
    }
    if (ok) {
        pl_ind_csv(w[0].f, &ind, label, 1);
        pl_ind_svg(w[1].f, &one, &label, 1, "Attention-pattern indicators per layer (mean over heads)");
        if (!pl_heatmap_svg(w[2].f, m, tok, len, "Attention maps of the first bytes (rows: queries, columns: keys)")) {
            fprintf(stderr, "mhe: heat-maps: %s\n", m->err);
            ok = 0;
        }
    }
    for (i = 0; i < n_open; i++) {
        if (ok && (ok = out_commit(&w[i])) != 0) printf("wrote %s\n", path[i]);
        else mhe_out_discard(&w[i]);
    }
    free(tok);
    mhe_indicators_free(&ind);
    return ok ? 0 : 1;
}

static int cmd_eval(int argc, char **argv) {
    opts o;
    mhe_model m;
    int *data;
    size_t n;
    float loss;
    int status, k;
    int64_t scored = 0;
    mhe_status es;
    if (!command_opts("eval", argc, argv, &o, &status)) return status;
    if (o.cuda && o.task && strcmp(o.task, "lm") != 0 && strcmp(o.task, "cls") != 0 && strcmp(o.task, "sr") != 0) {
        fprintf(stderr, "mhe: --device cuda evaluates --task lm, cls and sr only\n");
        return 1;
    }
    {   /* flags the chosen task would ignore */
        int lm = !o.task || strcmp(o.task, "lm") == 0;
        const char *unused = !lm && o.indicators ? "--indicators" : !lm && given(&o, "stride") ? "--stride"
                           : given(&o, "map-len") && !o.indicators ? "--map-len" : o.tc_given[train_field_index("sr_prob")] && !(o.task && strcmp(o.task, "sr") == 0) ? "--sr_prob" : NULL;
        if (unused) {
            fprintf(stderr, "mhe: eval: %s is not used %s\n", unused, strcmp(unused, "--map-len") == 0 ? "without --indicators"
                                                                : strcmp(unused, "--sr_prob") == 0 ? "without --task sr" : "with --task cls or sr (a decoder LM's text only)");
            return 2;
        }
    }
    if (o.indicators) {   /* PREFIX.csv beside nothing: a hidden .csv in a directory */
        const char *base = strrchr(o.indicators, '/');
        base = base ? base + 1 : o.indicators;
        if (!*base) { fprintf(stderr, "mhe: --indicators '%s': the prefix needs a file name (PREFIX.csv, PREFIX.svg)\n", o.indicators); return 1; }
    }
    if (o.cuda && o.indicators) {
        fprintf(stderr, "mhe: --indicators reads the CPU's reference attention maps: run it without --device cuda\n");
        return 1;
    }
    for (k = 0; o.indicators && k < 3; k++) {   /* the files write_indicators writes, before any work */
        static const char *suffix[3] = { ".csv", ".svg", "_maps.svg" };
        char path[MHE_PATH_LEN + 16];
        snprintf(path, sizeof path, "%s%s", o.indicators, suffix[k]);
        if (!check_output(&o, path, 0)) return 1;
    }
    if (!load_model(o.model, &m)) return 1;
    if (o.skip) {   /* hybrids "with skip": every layer whose kind is not mha loses its attention */
        int l, E = m.cfg.arch == MHE_ARCH_ENCDEC ? m.cfg.enc_layers : 0;
        for (l = 0; l < m.cfg.n_layers; l++) if (m.layers[E + l].attn.kind != MHE_ATTN_MHA) m.skip_attn |= (uint64_t)1 << l;
        if (!m.skip_attn) { fprintf(stderr, "mhe: --skip: every layer of this model is mha, nothing to skip\n"); mhe_model_free(&m); return 1; }
        printf("skipping the attention of layers");
        for (l = 0; l < m.cfg.n_layers; l++) if (m.skip_attn >> l & 1) printf(" %d (%s)", l, mhe_attn_kind_name(m.layers[E + l].attn.kind));
        printf("\n");
    }
    /* the default window shrinks to the model's; a window asked for is refused when it does not fit */
    if (o.tc.seq_len > m.cfg.max_seq_len && o.tc_given[train_field_index("seq_len")]) {
        fprintf(stderr, "mhe: --seq_len %d exceeds the model's max_seq_len %d\n", o.tc.seq_len, m.cfg.max_seq_len);
        mhe_model_free(&m);
        return 1;
    }
    if (o.tc.seq_len > m.cfg.max_seq_len) o.tc.seq_len = m.cfg.max_seq_len;
    if (o.tc_given[train_field_index("src_len")] && (m.cfg.arch != MHE_ARCH_ENCDEC || o.tc.src_len > m.cfg.max_seq_len)) {
        if (m.cfg.arch != MHE_ARCH_ENCDEC) fprintf(stderr, "mhe: --src_len is the source window of an encoder-decoder model; this one has arch=%s\n",
                                                   m.cfg.arch == MHE_ARCH_ENCODER ? "encoder" : "decoder");
        else fprintf(stderr, "mhe: --src_len %d exceeds the model's max_seq_len %d\n", o.tc.src_len, m.cfg.max_seq_len);
        mhe_model_free(&m);
        return 1;
    }
    if (o.indicators && given(&o, "map-len") && o.map_len > o.tc.seq_len) {
        fprintf(stderr, "mhe: --map-len %ld exceeds the evaluated window seq_len %d\n", o.map_len, o.tc.seq_len);
        mhe_model_free(&m);
        return 1;
    }
    if (o.task && (strcmp(o.task, "cls") == 0 || strcmp(o.task, "sr") == 0)) {
        mhe_text_set set;
        mhe_cls_metrics r;
        mhe_lexicon x;
        mhe_word_feats f;
        char err[MHE_ERR_LEN];
        int rc = 1, *tok = NULL, words = word_model(&m);
        size_t n = 0;
        mhe_status s;
        memset(&set, 0, sizeof set);
        memset(&f, 0, sizeof f);
        mhe_lexicon_init(&x, NULL);
        if (!o.data) { fprintf(stderr, "mhe: no data given (--data FILE)\n"); mhe_model_free(&m); return 1; }
        if (o.task[0] == 's') {
            if (!words || m.cfg.token_head != MHE_HEAD_SR) fprintf(stderr, "mhe: --task sr needs a word model with the S+R head (token_head=sr)\n");
            else if (read_words(o.data, &x, &tok, &n) && feats(&m, &x, &f)) {
#ifdef MHE_CUDA
                if (o.cuda) {   /* the same windows and corruption, each forward on the device */
                    mhe_cuda_model g;
                    if (open_device(&o, &m, &g, stdout)) {
                        if (mhe_cuda_evaluate_sr(&g, tok, n, &f, o.tc.batch, o.tc.seq_len, o.batches, o.tc.sr_prob, &r) != MHE_OK)
                            fprintf(stderr, "mhe: %s\n", g.err);
                        else { print_sr("", &r); rc = 0; }
                        mhe_cuda_model_free(&g);
                    }
                } else
#endif
                if (mhe_evaluate_sr(&m, tok, n, &f, o.tc.batch, o.tc.seq_len, o.batches, o.tc.sr_prob, &r) != MHE_OK) fprintf(stderr, "mhe: %s\n", m.err);
                else { print_sr("", &r); rc = 0; }
            }
        } else if (bytes_fit(&m, "--data")) {   /* it says why when not */
            s = words ? mhe_text_set_load_words(&set, &x, o.data, NULL, err) : mhe_text_set_load(&set, o.data, NULL, err);
            if (s == MHE_OK && m.bpe) s = mhe_text_set_bpe(&set, m.bpe, err);
            if (s != MHE_OK) fprintf(stderr, "mhe: %s\n", err);
            else if (!words || feats(&m, &x, &f)) {
                set.words = words ? &f : NULL;
#ifdef MHE_CUDA
                if (o.cuda) {   /* the same batches, each forward on the device */
                    mhe_cuda_model g;
                    if (open_device(&o, &m, &g, stdout)) {
                        if (mhe_cuda_evaluate_cls(&g, &set, o.tc.batch, o.tc.seq_len, &r) != MHE_OK) fprintf(stderr, "mhe: %s\n", g.err);
                        else { print_cls("", &r); rc = 0; }
                        mhe_cuda_model_free(&g);
                    }
                } else
#endif
                if (mhe_evaluate_cls(&m, &set, o.tc.batch, o.tc.seq_len, &r) != MHE_OK) fprintf(stderr, "mhe: %s\n", m.err);
                else { print_cls("", &r); rc = 0; }
            }
        }
        free(tok);
        mhe_text_set_free(&set);
        mhe_word_feats_free(&f);
        mhe_lexicon_free(&x);
        mhe_model_free(&m);
        return rc;
    }
    if (m.cfg.token_head == MHE_HEAD_SR) { fprintf(stderr, "mhe: this model has the S+R head: evaluate it with --task sr (or --task cls)\n"); mhe_model_free(&m); return 1; }
    if (!bytes_fit(&m, "--data") || !load_corpus(o.data, m.bpe, &data, &n)) { mhe_model_free(&m); return 1; }
    if (o.tc.src_len > m.cfg.max_seq_len) o.tc.src_len = m.cfg.max_seq_len;
    if (o.stride > o.tc.seq_len) { fprintf(stderr, "mhe: --stride %ld is longer than seq_len %d\n", o.stride, o.tc.seq_len); free(data); mhe_model_free(&m); return 2; }
#ifdef MHE_CUDA
    if (o.cuda) {   /* the same windows and batches, each forward on the device */
        mhe_cuda_model g;
        if (!open_device(&o, &m, &g, stdout)) { free(data); mhe_model_free(&m); return 1; }
        es = o.stride ? mhe_cuda_evaluate_strided(&g, data, n, o.tc.batch, o.tc.seq_len, (int)o.stride, &loss, &scored)
                      : mhe_cuda_evaluate_s2s(&g, data, n, o.tc.batch, o.tc.src_len, o.tc.seq_len, (int)o.batches, &loss);
        if (es != MHE_OK) memcpy(m.err, g.err, MHE_ERR_LEN);
        mhe_cuda_model_free(&g);
        if (es == MHE_ERR_NONFINITE) {   /* the host's forward over the same windows names the first layer */
            float l2;
            mhe_status hs = o.stride ? mhe_evaluate_strided(&m, data, n, o.tc.batch, o.tc.seq_len, (int)o.stride, &l2, &scored)
                                     : mhe_evaluate_s2s(&m, data, n, o.tc.batch, o.tc.src_len, o.tc.seq_len, (int)o.batches, &l2);
            if (hs == MHE_OK) snprintf(m.err, MHE_ERR_LEN, "%.160s (on the device; the CPU's loss over the same windows is finite, %g)", g.err, l2);
        }
    } else
#endif
    es = o.stride ? mhe_evaluate_strided(&m, data, n, o.tc.batch, o.tc.seq_len, (int)o.stride, &loss, &scored)
                  : mhe_evaluate_s2s(&m, data, n, o.tc.batch, o.tc.src_len, o.tc.seq_len, (int)o.batches, &loss);
    if (es != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); free(data); mhe_model_free(&m); return 1; }
    if (o.stride) printf("stride %ld, window %d: %lld %s scored\n", o.stride, o.tc.seq_len, (long long)scored, m.bpe ? "tokens" : "bytes");
    printf("loss %.4f  perplexity %.3f  bits/%s %.4f  unigram entropy %.4f\n", loss, mhe_perplexity(loss), m.bpe ? "token" : "byte",
           loss / log(2.0), mhe_unigram_entropy(data, n, m.cfg.vocab_size));
    if (o.indicators && write_indicators(&o, &m, data, n) != 0) { free(data); mhe_model_free(&m); return 1; }
    free(data);
    mhe_model_free(&m);
    return 0;
}

/* ---- generate ----------------------------------------------------------- */

/* What each layer keeps for this sequence, beside thesis Table 4.8 (bytes at
   half precision, B = 1, L = len): ours is float32, twice the table's bytes
   where a layer keeps what the table counts. */
static void print_cache_layers(const mhe_model *m, const mhe_kv_cache *kv, int len) {
    int l, E = m->cfg.arch == MHE_ARCH_ENCDEC ? m->cfg.enc_layers : 0, d = m->cfg.d_model, h = m->cfg.n_heads;
    fprintf(stderr, "cache/state per layer for %d tokens (float32 bytes; Table 4.8: fp16 bytes at B=1, L=%d, d=%d, h=%d):\n", len, len, d, h);
    for (l = E; l < m->n_total_layers; l++) {
        int kind = m->layers[l].attn.kind;
        char formula[64];
        fprintf(stderr, "  layer %d %-12s %10zu B", l - E, mhe_attn_kind_name(kind), kv->layer_bytes[l]);
        if (kv->shared_bytes[l]) fprintf(stderr, " + %zu B maps shared by all sequences", kv->shared_bytes[l]);
        if (mhe_attn_cost_formula(MHE_COST_CACHE, kind, formula, sizeof formula))
            fprintf(stderr, "   Table 4.8 %s = %.0f B (x2 = %.0f)", formula, mhe_attn_cost(MHE_COST_CACHE, kind, 1, len, d, h, 1),
                    2 * mhe_attn_cost(MHE_COST_CACHE, kind, 1, len, d, h, 1));
        if (kind == MHE_ATTN_TAYLOR) fprintf(stderr, " [ours: Based's feature map, state per head (1 + d_h + d_h(d_h+1)/2)(d_h + 1) floats]");
        if (kind == MHE_ATTN_RNDEMB_QK || kind == MHE_ATTN_FIXEDSEQ_QK) fprintf(stderr, " [2BLd: V rows; the table's shared 2Ld keys are our maps]");
        fprintf(stderr, "\n");
    }
}

/* Where the next-token logits come from: feed(ctx, tokens, n) runs n tokens
   (the prompt at once, then one at a time) and returns the logits after the
   last, or NULL with the message printed. */
typedef const float *(*feed_fn)(void *ctx, const int *tokens, int n);

typedef struct { mhe_model *m; mhe_kv_cache *kv; } cpu_feed;

static const float *feed_cpu(void *ctx, const int *tokens, int n) {
    cpu_feed *f = (cpu_feed *)ctx;
    mhe_status s = mhe_prefill(f->m, f->kv, tokens, n);   /* the prompt in chunks, each weight read once per chunk */
    if (s == MHE_ERR_NONFINITE) return f->kv->logits;   /* sample_text names the layer */
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", f->m->err); return NULL; }
    return f->kv->logits;
}

/* logits that are not all finite: a forward pass over the n tokens so far (and
   the source) finds the first layer that went non-finite; the message says it */
static void report_nonfinite(mhe_model *m, const int *tok, int n, const char *source) {
    mhe_batch bt;
    int *src = NULL, ns = source ? (int)strlen(source) : 0, i;
    memset(&bt, 0, sizeof bt);
    bt.B = 1; bt.T = n; bt.tokens = tok;
    if (m->cfg.arch == MHE_ARCH_ENCDEC && ns > 0 && (src = (int *)malloc((size_t)ns * sizeof(int))) != NULL) {
        for (i = 0; i < ns; i++) src[i] = (unsigned char)source[i];
        bt.Ts = ns; bt.src = src;
    }
    if (mhe_model_forward_batch(m, &bt, NULL) != MHE_OK) fprintf(stderr, "mhe: the logits after %d tokens are not finite (%s); nothing written\n", n, m->err);
    else if (mhe_model_find_nonfinite(m) != MHE_OK) fprintf(stderr, "mhe: the logits after %d tokens are not finite: %s; nothing written\n", n, m->err);
    else fprintf(stderr, "mhe: the logits after %d tokens are not finite (the batched forward's are: the decoding path overflowed); nothing written\n", n);
    free(src);
}

static int all_finite(const float *x, int n) {
    int i;
    for (i = 0; i < n; i++) if (!arg_finite(x[i])) return 0;
    return 1;
}

static int id_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* token ids "5 17 3" (whitespace-separated, len bytes) into a new array of
   ids in [0, V): base 10, any number of digits (leading zeros too); a word
   that is no number, or one outside [0, V), is named as written */
static int parse_ids_n(const char *s, size_t len, int V, int **out, int *n, const char *flag, const char *range) {
    size_t cap = len / 2 + 1, p = 0;
    int *v = (int *)malloc(cap * sizeof(int)), k = 0;
    if (!v) { fprintf(stderr, "mhe: out of memory\n"); return 0; }
    for (;;) {
        size_t b, d = 0;
        long x = 0;
        int neg;
        while (p < len && id_space(s[p])) p++;
        if (p == len) break;
        b = p;
        neg = s[p] == '-';
        if (neg) p++;
        for (; p < len && s[p] >= '0' && s[p] <= '9'; p++, d++)
            if (x <= V) x = x * 10 + (s[p] - '0');   /* past V it is out of range anyway: no overflow */
        if (!d || (p < len && !id_space(s[p]))) {
            size_t e = p;
            while (e < len && !id_space(s[e]) && e - b < 20) e++;
            fprintf(stderr, "mhe: %s: '%.*s' (id %d) is not a number\n", flag, (int)(e - b), s + b, k + 1);
            free(v);
            return 0;
        }
        if ((neg && x) || x >= V) {
            fprintf(stderr, "mhe: %s: %.*s (id %d) is outside %s [0, %d)\n", flag, (int)(p - b < 40 ? p - b : 40), s + b, k + 1, range, V);
            free(v);
            return 0;
        }
        v[k++] = (int)x;
    }
    if (k == 0) { fprintf(stderr, "mhe: %s: nothing given\n", flag); free(v); return 0; }
    *out = v; *n = k;
    return 1;
}

static int parse_ids(const char *s, int V, int **out, int *n, const char *flag, const char *range) {
    return parse_ids_n(s, strlen(s), V, out, n, flag, range);
}

/* the prompt and n tokens sampled after it on stdout; the sampler and its RNG
   are the host's whichever side computes the logits. The text is printed once
   it is complete: logits that are not finite (sampling would read them as
   token 0) stop the run with nothing printed. Returns the exit status. */
static int sample_text(const opts *o, mhe_model *m, const int *prompt, size_t plen, long n, feed_fn feed, void *ctx) {
    int *tok = (int *)malloc((plen + (size_t)n + 1) * sizeof(int)), at, V = m->cfg.vocab_size;
    const float *logits;
    mhe_rng r;
    size_t i;
    if (!tok) { fprintf(stderr, "mhe: out of memory\n"); return 1; }
    for (i = 0; i < plen; i++) tok[i] = prompt[i];
    mhe_rng_seed(&r, o->tc.seed);
    logits = feed(ctx, tok, (int)plen);
    for (at = 0; logits && at < n; at++) {
        if (!all_finite(logits, V)) { report_nonfinite(m, tok, (int)plen + at, o->source); free(tok); return 1; }
        tok[plen + at] = mhe_sample(logits, V, (float)o->temperature, (int)o->top_k, &r);
        if (at + 1 < n) logits = feed(ctx, &tok[plen + at], 1);
    }
    if (logits && n == 0 && !all_finite(logits, V)) { report_nonfinite(m, tok, (int)plen, o->source); free(tok); return 1; }
    if (!logits) { free(tok); return 1; }
    if (o->prompt_ids) {   /* ids in, ids out */
        for (i = 0; i < plen + (size_t)n; i++) printf("%s%d", i ? " " : "", tok[i]);
        putchar('\n');
        free(tok);
        return 0;
    }
    at = print_tokens(m, tok, plen + (size_t)n);
    putchar('\n');
    free(tok);
    return at ? 0 : 1;
}

#ifdef MHE_CUDA
typedef struct { mhe_cuda_model *g; mhe_cuda_kv_cache *kv; float *logits; } cuda_feed;

static const float *feed_cuda(void *ctx, const int *tokens, int n) {
    cuda_feed *f = (cuda_feed *)ctx;
    if (mhe_cuda_prefill(f->g, f->kv, tokens, n, f->logits) != MHE_OK) { fprintf(stderr, "mhe: %s\n", f->g->err); return NULL; }
    return f->logits;
}

/* generate --device cuda: the prompt in one prefill, then a decode step per token */
static int generate_cuda(const opts *o, mhe_model *m, const int *prompt, size_t plen, const int *src, int srcl, long n, int len) {
    mhe_cuda_model g;
    mhe_cuda_kv_cache kv;
    cuda_feed f;
    size_t per_token = 0;
    int l, rc = 1, E = m->cfg.arch == MHE_ARCH_ENCDEC ? m->cfg.enc_layers : 0;
    if (!open_device(o, m, &g, stderr)) return 1;
    if (mhe_cuda_kv_cache_init(&kv, &g, len) != MHE_OK) { fprintf(stderr, "mhe: --device cuda: %s\n", g.err); mhe_cuda_model_free(&g); return 1; }
    for (l = E; l < m->n_total_layers; l++) per_token += (size_t)kv.kv_w[l] * sizeof(float);
    if (kv.kb) per_token += (size_t)m->cfg.n_heads * sizeof(float);
    fprintf(stderr, "device KV cache: %d tokens x %zu bytes per token (all layers, K and V%s) = %.1f KB\n", len, per_token,
            kv.kb ? ", MHE-ADD key biases" : "", (double)len * per_token / 1024.0);
    if (E) {   /* the source through the encoder once: its cross-attention K|V stay in the device cache */
        mhe_status es = mhe_cuda_kv_cache_encode(&g, &kv, src, srcl);
        if (es != MHE_OK) {
            fprintf(stderr, "mhe: --device cuda: %s\n", g.err);
            mhe_cuda_kv_cache_free(&kv);
            mhe_cuda_model_free(&g);
            return 1;
        }
        fprintf(stderr, "device cross-attention cache: %d source tokens\n", srcl);
    }
    f.g = &g; f.kv = &kv;
    f.logits = (float *)malloc((size_t)m->cfg.vocab_size * sizeof(float));
    if (!f.logits) fprintf(stderr, "mhe: out of memory\n");
    else rc = sample_text(o, m, prompt, plen, n, feed_cuda, &f);
    free(f.logits);
    mhe_cuda_kv_cache_free(&kv);
    mhe_cuda_model_free(&g);
    return rc;
}
#endif

static int cmd_generate(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_kv_cache kv;
    cpu_feed f;
    const char *prompt;
    size_t plen, srcl = 0;
    int len, rc = 1, room, *ptok = NULL, *src = NULL;
    long n;
    if (!command_opts("generate", argc, argv, &o, &rc)) return rc;
    rc = 1;
    if (!load_model(o.model, &m)) return 1;
    if (m.cfg.arch == MHE_ARCH_ENCODER) { fprintf(stderr, "mhe: generate needs a decoder (this model has arch=encoder)\n"); mhe_model_free(&m); return 1; }
    if (m.cfg.embedding != MHE_EMB_VOCAB || m.cfg.token_head != MHE_HEAD_LM) {
        fprintf(stderr, "mhe: nothing to generate: %s\n", m.cfg.embedding != MHE_EMB_VOCAB ? "a hash embedding has no vocabulary softmax (embedding=hash-*)"
                                                                                        : "the model has the S+R head, not an LM head");
        mhe_model_free(&m);
        return 1;
    }
    if (m.cfg.arch != MHE_ARCH_ENCDEC && o.source) {
        fprintf(stderr, "mhe: --source is what an encoder-decoder model encodes; this model is a decoder (give --prompt)\n");
        mhe_model_free(&m);
        return 1;
    }
    if (m.cfg.arch == MHE_ARCH_ENCDEC && (!o.source || !*o.source || !text_tokens(&m, o.source, strlen(o.source), &src, &srcl) ||
                                          srcl == 0 || srcl > (size_t)m.cfg.max_seq_len)) {
        fprintf(stderr, "mhe: an encoder-decoder model needs --source TEXT of 1..%d %s\n", m.cfg.max_seq_len, m.bpe ? "tokens" : "bytes");
        free(src);
        mhe_model_free(&m);
        return 1;
    }
    if (o.ids && (o.prompt || m.cfg.arch == MHE_ARCH_ENCDEC)) {
        fprintf(stderr, "mhe: --ids is the prompt of a decoder, as token ids: %s\n", o.prompt ? "give --prompt or --ids, not both" : "not for an encoder-decoder model");
        free(src); mhe_model_free(&m);
        return 1;
    }
    /* the default prompt of an encoder-decoder: the source's last token */
    prompt = o.prompt ? o.prompt : "\n";
    if (o.ids) {
        int k;
        if (!parse_ids(o.ids, m.cfg.vocab_size, &o.prompt_ids, &k, "--ids", "the vocabulary")) { free(src); mhe_model_free(&m); return 1; }
        ptok = (int *)malloc((size_t)(k > 0 ? k : 1) * sizeof(int));
        if (ptok) { memcpy(ptok, o.prompt_ids, (size_t)k * sizeof(int)); plen = (size_t)k; }
    } else if (!o.prompt && m.cfg.arch == MHE_ARCH_ENCDEC) {
        ptok = (int *)malloc(sizeof(int));
        if (ptok) { ptok[0] = src[srcl - 1]; plen = 1; }
    } else if (!text_tokens(&m, prompt, strlen(prompt), &ptok, &plen)) {   /* said why */
        free(ptok); free(src); free(o.prompt_ids); mhe_model_free(&m);
        return 1;
    }
    if (!ptok || plen == 0 || plen > (size_t)m.cfg.max_seq_len) {
        fprintf(stderr, "mhe: prompt must have 1..%d %s\n", m.cfg.max_seq_len, m.bpe || o.ids ? "tokens" : "bytes");
        free(ptok); free(src); free(o.prompt_ids); mhe_model_free(&m);
        return 1;
    }
    /* the last new token is sampled, never decoded: N tokens need plen + N - 1 cache positions */
    room = m.cfg.max_seq_len - (int)plen + 1;
    n = o.n_tokens;
    if (!given(&o, "n")) n = n < room ? n : room;   /* the default: what fits */
    else if (n > room) {
        fprintf(stderr, "mhe: --n %ld: a prompt of %zu tokens leaves room for %d new tokens (max_seq_len %d)\n", n, plen, room, m.cfg.max_seq_len);
        free(ptok); free(src); free(o.prompt_ids); mhe_model_free(&m);
        return 1;
    }
    len = (int)plen + (n > 0 ? (int)n - 1 : 0);
#ifdef MHE_CUDA
    if (o.cuda) {
        rc = generate_cuda(&o, &m, ptok, plen, src, (int)srcl, n, len);
        free(ptok); free(src); free(o.prompt_ids); mhe_model_free(&m);
        return rc;
    }
#endif
    if (mhe_kv_cache_init(&kv, &m, len, NULL) != MHE_OK) { fprintf(stderr, "mhe: cannot allocate the KV cache\n"); free(ptok); free(src); free(o.prompt_ids); mhe_model_free(&m); return 1; }
    fprintf(stderr, "KV cache: %d tokens x %zu bytes per token (all layers, K and V) = %.1f KB\n", len, kv.bytes_per_token, kv.bytes / 1024.0);
    print_cache_layers(&m, &kv, len);
    if (m.cfg.arch == MHE_ARCH_ENCDEC) {
        if (mhe_kv_cache_encode(&m, &kv, src, (int)srcl) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto done; }
        fprintf(stderr, "cross-attention cache: %d source tokens, %.1f KB allocated for up to %d\n", (int)srcl, kv.cross_bytes / 1024.0, m.cfg.max_seq_len);
    }
    f.m = &m; f.kv = &kv;
    rc = sample_text(&o, &m, ptok, plen, n, feed_cpu, &f);
done:
    free(ptok); free(src);
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    free(o.prompt_ids);
    return rc;
}

/* ---- import, logits --------------------------------------------------------- */

static int cmd_import(int argc, char **argv) {
    opts o;
    int rc, i;
    char note[IMP_NOTE_LEN], err[MHE_ERR_LEN], **av = (char **)malloc((size_t)(argc + 1) * sizeof(char *));
    if (!av) { fprintf(stderr, "mhe: out of memory\n"); return 1; }
    for (i = 0; i < argc; i++) av[i] = strcmp(argv[i], "-o") == 0 ? (char *)"--out" : argv[i];   /* -o is --out */
    av[argc] = NULL;
    i = command_opts("import", argc, av, &o, &rc);
    free(av);
    if (!i) return rc;
    if (o.n_args != 1) { fprintf(stderr, "mhe: import takes one directory (config.json, model.safetensors), got %d arguments\n", o.n_args); return 2; }
    if (!o.args[0][0]) { fprintf(stderr, "mhe: import: the directory is '' (an empty path); give the directory that holds config.json\n"); return 2; }
    {   /* the files read are inputs like any flag's: never the output */
        static char in[3][MHE_PATH_LEN + 32];
        static const char *const name[3] = { "config.json", "model.safetensors", "tokenizer.json" };
        for (i = 0; i < 3; i++) {
            if (strlen(o.args[0]) >= MHE_PATH_LEN) { fprintf(stderr, "mhe: import: the directory path is too long\n"); return 1; }
            snprintf(in[i], sizeof in[i], "%s/%s", o.args[0], name[i]);
            o.in_files[i] = in[i];
        }
    }
    if (!check_output(&o, o.out, 0)) return 1;
    if (!imp_run(o.args[0], o.out, given(&o, "mask-token") ? (int)o.mask_token : -1, o.drop_nsp, note, err)) { fprintf(stderr, "mhe: %s: %s; nothing written\n", o.args[0], err); return 1; }
    fprintf(stderr, "%s\n", note);
    {
        mhe_model m;
        if (!load_model(o.out, &m)) return 1;
        printf("imported %s: ", o.args[0]);
        describe(&m);
        mhe_model_free(&m);
    }
    return 0;
}

static int cmd_logits(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_batch b;
    int rc, *tok = NULL, *types = NULL, T, t, v, label = 0, cls;
    if (!command_opts("logits", argc, argv, &o, &rc)) return rc;
    if (!load_model(o.model, &m)) return 1;
    cls = o.task && strcmp(o.task, "cls") == 0;
    rc = 1;
    if (cls && m.cfg.n_classes <= 0) { fprintf(stderr, "mhe: --task cls: the model has no classification head (n_classes=0)\n"); goto done; }
    if (!cls && (m.cfg.token_head != MHE_HEAD_LM || m.cfg.arch == MHE_ARCH_ENCDEC)) { fprintf(stderr, "mhe: logits: a decoder or encoder with an LM head\n"); goto done; }
    if (!parse_ids(o.ids, m.cfg.vocab_size, &tok, &T, "--ids", "the vocabulary")) goto done;
    if (T > m.cfg.max_seq_len) { fprintf(stderr, "mhe: --ids: %d tokens exceed the model's max_seq_len %d\n", T, m.cfg.max_seq_len); goto done; }
    if (o.types) {
        int nt;
        if (m.cfg.type_vocab < 1) { fprintf(stderr, "mhe: --types: the model has no token-type table (type_vocab=0)\n"); goto done; }
        if (!parse_ids(o.types, m.cfg.type_vocab, &types, &nt, "--types", "the token types (type_vocab)")) goto done;
        if (nt != T) { fprintf(stderr, "mhe: --types: %d types for %d token ids\n", nt, T); goto done; }
    }
    memset(&b, 0, sizeof b);
    b.B = 1; b.T = T; b.tokens = tok; b.labels = cls ? &label : NULL; b.types = types;
    if (mhe_model_forward_batch(&m, &b, NULL) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto done; }
    if (cls)
        for (v = 0; v < m.cfg.n_classes; v++) printf(v + 1 < m.cfg.n_classes ? "%.9g " : "%.9g\n", m.acts.cls_logits[v]);
    else
        for (t = 0; t < T; t++)
            for (v = 0; v < m.cfg.vocab_size; v++) printf(v + 1 < m.cfg.vocab_size ? "%.9g " : "%.9g\n", m.acts.logits[(size_t)t * m.cfg.vocab_size + v]);
    rc = 0;
done:
    free(tok);
    free(types);
    mhe_model_free(&m);
    return rc;
}

/* ---- grad --------------------------------------------------------------- */

/* a finite loss can still have a gradient that overflowed: refused (m->err says where), nothing written */
static int grads_finite(mhe_model *m) {
    int i;
    int64_t e;
    for (i = 0; i < m->n_tensors; i++)
        for (e = 0; m->params[i].grad && e < m->params[i].size; e++)
            if (!arg_finite(m->params[i].grad[e])) {
                snprintf(m->err, MHE_ERR_LEN, "the gradient of %s element %lld is %s; nothing written", m->params[i].name, (long long)e,
                         m->params[i].grad[e] > 0 ? "inf" : m->params[i].grad[e] < 0 ? "-inf" : "nan");
                return 0;
            }
    return 1;
}

/* one line of a --tokens file: ids, "." for padding (only at the end), "|" between source and decoder ids */
typedef struct { int *v; int n, cap, bar; } idline;

static int idline_push(idline *l, int v) {
    if (l->n == l->cap) {
        int *nv;
        l->cap = l->cap ? 2 * l->cap : 256;
        nv = (int *)realloc(l->v, (size_t)l->cap * sizeof(int));
        if (!nv) return 0;
        l->v = nv;
    }
    l->v[l->n++] = v;
    return 1;
}

/* real (non-padding) ids among the first n of v; -1 when padding is followed by an id */
static int real_len(const int *v, int n) {
    int i, len = 0;
    for (i = 0; i < n; i++) {
        if (v[i] == -2) continue;
        if (len != i) return -1;
        len++;
    }
    return len;
}

/* mhe grad on a word model: each line `LABELS | TEXT`, the targets of the
   token head (S+R: 0 original, 1 shuffled, 2 random, -1 ignored; `.` pads)
   and the text, split by the word splitter; the items <pad> <unk> <s> </s>
   are the special tokens */
static int grad_words(opts *o, mhe_model *m, char *text) {
    static const char *special[MHE_N_SPECIAL] = { "<pad>", "<unk>", "<s>", "</s>" };
    mhe_lexicon x;
    mhe_word_feats f;
    idline lab, tok;
    int rows = 0, T = -1, line = 0, rc = 1, b, t, *lens = NULL, *tk = NULL, *tg = NULL;
    char *p = text, *nl;
    mhe_batch bt;
    float loss;
    mhe_lexicon_init(&x, NULL);
    memset(&f, 0, sizeof f);
    memset(&lab, 0, sizeof lab);
    memset(&tok, 0, sizeof tok);
    for (; *p; p = nl ? nl + 1 : p + strlen(p)) {
        char *bar, *q;
        int nlab = 0, nreal = 0, nwords = 0;
        line++;
        nl = strchr(p, '\n');
        if (nl) *nl = 0;
        for (q = p; *q == ' ' || *q == '\t' || *q == '\r'; q++) {}
        if (!*q) { if (!nl) break; continue; }
        bar = strchr(p, '|');
        if (!bar) { fprintf(stderr, "mhe: %s: line %d: a word model reads `LABELS | TEXT`\n", o->tokens, line); goto out; }
        *bar = 0;
        for (q = p; ; ) {   /* the labels */
            char *end;
            long v;
            while (*q == ' ' || *q == '\t' || *q == '\r') q++;
            if (!*q) break;
            if (*q == '.' && (q[1] == 0 || strchr(" \t\r", q[1]))) { v = -2; end = q + 1; }
            else {
                v = strtol(q, &end, 10);
                if (end == q || v < -1 || v > 2147483647L || (*end && !strchr(" \t\r", *end))) {
                    fprintf(stderr, "mhe: %s: line %d: bad label near '%.10s'\n", o->tokens, line, q);
                    goto out;
                }
            }
            if (v != -2 && nreal != nlab) { fprintf(stderr, "mhe: %s: line %d: padding `.` must come last\n", o->tokens, line); goto out; }
            if (!idline_push(&lab, (int)v)) goto oom;
            nlab++;
            nreal += v != -2;
            q = end;
        }
        for (q = bar + 1; ; ) {   /* the text: items of words */
            char *e;
            size_t pos = 0, ws, wn;
            int k, ty;
            while (*q == ' ' || *q == '\t' || *q == '\r') q++;
            if (!*q) break;
            for (e = q; *e && !strchr(" \t\r", *e); e++) {}
            for (k = 0; k < MHE_N_SPECIAL; k++) if ((size_t)(e - q) == strlen(special[k]) && !strncmp(q, special[k], (size_t)(e - q))) break;
            if (k < MHE_N_SPECIAL) { if (!idline_push(&tok, k)) goto oom; nwords++; }
            else
                while ((wn = mhe_word_next(q, (size_t)(e - q), &pos, &ws)) > 0) {
                    if (mhe_lexicon_intern(&x, q + ws, wn, 1, &ty) != MHE_OK || !idline_push(&tok, MHE_N_SPECIAL + ty)) goto oom;
                    nwords++;
                }
            q = e;
        }
        if (nwords != nreal || nreal < 1) {
            fprintf(stderr, "mhe: %s: line %d: %d labels for %d words (one label per word; `.` for padding)\n", o->tokens, line, nreal, nwords);
            goto out;
        }
        if (T >= 0 && nlab != T) { fprintf(stderr, "mhe: %s: line %d has %d labels, earlier lines %d\n", o->tokens, line, nlab, T); goto out; }
        T = nlab;
        for (t = nreal; t < T; t++) if (!idline_push(&tok, MHE_TOK_PAD)) goto oom;
        rows++;
        if (!nl) break;
    }
    if (rows == 0) { fprintf(stderr, "mhe: %s: no line of `LABELS | TEXT`\n", o->tokens); goto out; }
    if (!feats(m, &x, &f)) goto out;
    lens = (int *)malloc((size_t)rows * sizeof(int));
    tg = (int *)malloc((size_t)rows * T * sizeof(int));
    if (!lens || !tg) goto oom;
    tk = tok.v;
    for (b = 0; b < rows; b++) {
        lens[b] = 0;
        for (t = 0; t < T; t++) {
            int v = lab.v[(size_t)b * T + t];
            tg[(size_t)b * T + t] = v == -2 ? -1 : v;
            lens[b] += v != -2;
        }
    }
    memset(&bt, 0, sizeof bt);
    bt.B = rows; bt.T = T; bt.tokens = tk; bt.targets = tg; bt.lengths = lens; bt.words = &f;
    mhe_model_zero_grad(m);
    if (mhe_model_forward_batch(m, &bt, &loss) != MHE_OK || mhe_model_backward(m) != MHE_OK || !grads_finite(m) ||
        mhe_grads_save(m, o->out) != MHE_OK) {
        fprintf(stderr, "mhe: %s\n", m->err);
        goto out;
    }
    printf("loss %.6f over %d x %d word tokens (%d word types); wrote %s\n", loss, rows, T, x.n, o->out);
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "mhe: out of memory\n");
out:
    free(lab.v); free(tok.v); free(lens); free(tg);
    mhe_word_feats_free(&f);
    mhe_lexicon_free(&x);
    return rc;
}

/* ---- hash --------------------------------------------------------------- */

/* how each word of the texts embeds under a model: its row, bucket or bits */
static int cmd_hash(int argc, char **argv) {
    opts o;
    mhe_model m;
    int i, rc, T;
    unsigned char *bits;
    if (!command_opts("hash", argc, argv, &o, &rc)) return rc;
    rc = 0;
    if (!load_model(o.model, &m)) return 1;
    if (!word_model(&m)) { fprintf(stderr, "mhe: this model embeds byte tokens, not words\n"); mhe_model_free(&m); return 1; }
    T = m.cfg.hash_bits;
    bits = (unsigned char *)malloc(MHE_BITS_BYTES(T));
    if (!bits) { mhe_model_free(&m); return 1; }
    for (i = 0; i < o.n_args && rc == 0; i++) {
        const char *text = o.args[i];
        size_t pos = 0, ws, wn, len = strlen(text);
        while ((wn = mhe_word_next(text, len, &pos, &ws)) > 0) {
            int32_t id = 0;
            size_t k;
            if (mhe_model_hash_word(&m, text + ws, wn, &id, bits) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); rc = 1; break; }
            for (k = 0; k < wn; k++) putchar(text[ws + k] >= 'A' && text[ws + k] <= 'Z' ? text[ws + k] + 32 : text[ws + k]);
            if (m.cfg.embedding == MHE_EMB_VOCAB) printf("\tid %d\n", (int)id);
            else if (m.cfg.embedding == MHE_EMB_HASH_EMB) printf("\tbucket %d\n", (int)id);
            else {
                printf("\tbits ");
                for (k = 0; k < MHE_BITS_BYTES(T); k++) printf("%02x", bits[k]);
                printf("\n");
            }
        }
    }
    free(bits);
    mhe_model_free(&m);
    return rc;
}

/* ---- tokenize -------------------------------------------------------------- */

/* --tokenizer or --model's tokenizer into b */
static int tokenizer_of(const opts *o, mhe_bpe *b) {
    mhe_model m;
    if (!o->tokenizer == !o->model) { fprintf(stderr, "mhe: tokenize: give --tokenizer TOK or --model M (one of them)\n"); return 0; }
    if (o->tokenizer) {
        if (mhe_bpe_load(b, o->tokenizer) != MHE_OK) { fprintf(stderr, "mhe: %s\n", b->err); return 0; }
        return 1;
    }
    if (!load_model(o->model, &m)) return 0;
    if (!m.bpe) { fprintf(stderr, "mhe: %s has no tokenizer (it reads %s)\n", o->model, word_model(&m) ? "words" : "bytes"); mhe_model_free(&m); return 0; }
    *b = *m.bpe;   /* the model's tokenizer moves to b (both from malloc) */
    free(m.bpe);
    m.bpe = NULL;
    mhe_model_free(&m);
    return 1;
}

/* the flags each action reads: any other given is a usage error, never ignored */
static int tokenize_flags_fit(const opts *o, const char *act) {
    static const struct { const char *act, *takes, *usage; } t[] = {
        { "train", " data vocab split added out ", "--data TEXT --vocab N --out TOK [--split S] [--added \"T1 T2 ..\"]" },
        { "convert", " tokenizer out ", "--tokenizer FILE --out TOK" },
        { "encode", " data tokenizer model special threads ", "--data TEXT and --tokenizer TOK or --model M [--special] [--threads N]" },
        { "decode", " data tokenizer model ", "--data IDS and --tokenizer TOK or --model M" },
    };
    size_t a, i;
    char key[40];
    for (a = 0; a < sizeof t / sizeof t[0] && strcmp(t[a].act, act) != 0; a++) {}
    if (a == sizeof t / sizeof t[0]) { fprintf(stderr, "mhe: tokenize: unknown action '%s' (train, encode, decode or convert)\n", act); return 0; }
    for (i = 0; i < (size_t)o->cmd->n_flags; i++) {
        if (!o->given[i]) continue;
        snprintf(key, sizeof key, " %s ", o->cmd->flags[i].name);
        if (!strstr(t[a].takes, key)) {
            fprintf(stderr, "mhe: tokenize %s does not use --%s (it takes %s)\n", act, o->cmd->flags[i].name, t[a].usage);
            return 0;
        }
    }
    return 1;
}

static int cmd_tokenize(int argc, char **argv) {
    opts o;
    mhe_bpe b;
    char *text = NULL;
    size_t len = 0, n = 0, i;
    int rc, *ids = NULL;
    const char *act;
    if (!command_opts("tokenize", argc, argv, &o, &rc)) return rc;
    if (o.n_args != 1) { fprintf(stderr, "mhe: tokenize: give one action: train, encode, decode or convert\n"); return 2; }
    act = o.args[0];
    if (!tokenize_flags_fit(&o, act)) return 2;
    mhe_bpe_init(&b, NULL);
    rc = 1;
    if (strcmp(act, "train") == 0) {
        char **names = NULL, *buf = NULL;
        int n_added = 0;
        if (!o.data || !o.out || !given(&o, "vocab")) { fprintf(stderr, "mhe: tokenize train needs --data TEXT, --vocab N and --out TOK\n"); return 2; }
        if (!check_output(&o, o.out, 0) || !read_text(o.data, &text, &len)) return 1;
        if (o.added) {   /* space-separated names, every one of them, copied so that each ends with a NUL */
            char *p;
            size_t cap = strlen(o.added) / 2 + 1;
            buf = (char *)malloc(strlen(o.added) + 1);
            names = (char **)malloc(cap * sizeof *names);
            if (!buf || !names) { fprintf(stderr, "mhe: out of memory\n"); free(buf); free(names); free(text); return 1; }
            strcpy(buf, o.added);
            for (p = strtok(buf, " "); p; p = strtok(NULL, " ")) names[n_added++] = p;
        }
        if (n_added + 256 > o.n_tokens)
            fprintf(stderr, "mhe: --added: %d added tokens and the 256 bytes do not fit in --vocab %ld\n", n_added, o.n_tokens);
        else if (mhe_bpe_train(&b, text, len, (int)o.n_tokens, o.split_s && strcmp(o.split_s, "none") == 0 ? MHE_BPE_SPLIT_NONE : MHE_BPE_SPLIT_GPT2,
                          (const char *const *)names, n_added) != MHE_OK)
            fprintf(stderr, "mhe: %s\n", b.err);
        else if (mhe_bpe_save(&b, o.out) != MHE_OK) fprintf(stderr, "mhe: %s: cannot write the tokenizer\n", o.out);
        else {
            printf("%d tokens (256 bytes, %d merges, %d added)%s; wrote %s\n", b.n_tokens, b.n_merges, n_added,
                   b.n_tokens < o.n_tokens ? ": the text ran out of pairs before --vocab" : "", o.out);
            rc = 0;
        }
        free(buf);
        free(names);
    } else if (strcmp(act, "convert") == 0) {
        if (!o.tokenizer || !o.out) { fprintf(stderr, "mhe: tokenize convert needs --tokenizer FILE and --out TOK\n"); return 2; }
        if (check_output(&o, o.out, 0) && tokenizer_of(&o, &b)) {
            if (mhe_bpe_save(&b, o.out) != MHE_OK) fprintf(stderr, "mhe: %s: cannot write the tokenizer\n", o.out);
            else { printf("%d tokens, %d merges, %d added; wrote %s\n", b.n_tokens, b.n_merges, b.n_added, o.out); rc = 0; }
        }
    } else if (strcmp(act, "encode") == 0 || strcmp(act, "decode") == 0) {
        char err[MHE_ERR_LEN];
        if (!o.data) {
            fprintf(stderr, "mhe: tokenize %s takes --data and --tokenizer or --model%s\n", act, act[0] == 'e' ? " (and --special)" : "");
            return 2;
        }
        if (!tokenizer_of(&o, &b) || !read_text(o.data, &text, &len)) { mhe_bpe_free(&b); return 1; }
        if (act[0] == 'e') {
            int cls = o.special ? b.cls : -1, sep = o.special ? b.sep : -1;
            ids = (int *)malloc((mhe_bpe_max_ids(&b, len) + 1) * sizeof(int));
            if (o.special && cls < 0 && sep < 0) fprintf(stderr, "mhe: --special: this tokenizer has no cls or sep token (a template of BERT's)\n");
            else if (!ids || mhe_bpe_encode_threads(&b, text, len, ids, mhe_bpe_max_ids(&b, len), &n, (int)o.threads, err) != MHE_OK)
                fprintf(stderr, "mhe: %s\n", ids ? err : "out of memory");
            else {
                if (cls >= 0) printf(n ? "%d " : "%d", cls);
                for (i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
                if (sep >= 0) printf(n || cls >= 0 ? " %d" : "%d", sep);
                printf("\n");
                rc = 0;
            }
        } else {   /* whitespace-separated ids, each checked, as --ids is everywhere */
            char *out = NULL;
            int k = 0;
            size_t skip = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0, p;   /* a BOM, as in config files */
            rc = 0;
            for (p = skip; p < len && id_space(text[p]); p++) {}
            /* no ids at all decode to no text */
            if (p < len && !parse_ids_n(text + skip, len - skip, b.n_tokens, &ids, &k, o.data, "the tokenizer's ids")) rc = 1;
            n = (size_t)k;
            if (rc == 0) {
                size_t olen;
                if (mhe_bpe_decode(&b, ids, n, NULL, 0, &olen, err) != MHE_OK) { fprintf(stderr, "mhe: %s: %s\n", o.data, err); rc = 1; }
                else if (!(out = (char *)malloc(olen + 1))) rc = 1;
                else { mhe__must(mhe_bpe_decode(&b, ids, n, out, olen, &olen, err)); fwrite(out, 1, olen, stdout); }
            }
            free(out);
        }
    }
    free(text); free(ids);
    mhe_bpe_free(&b);
    return rc;
}

static int cmd_grad(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_batch bt;
    char *text, *p;
    size_t len;
    idline all;   /* every line's ids, one after another; bar = source ids per line */
    int rows = 0, width = -1, src_w = -1, cur = 0, cur_bar = -1, B, T, Ts = 0, b, t, rc = 1, encdec, line = 1;
    int *tok = NULL, *tgt, *src, *lens, *slens;
    float loss;
    if (!command_opts("grad", argc, argv, &o, &rc) || !check_output(&o, o.out, 0)) return rc;
    rc = 1;
    if (!load_model(o.model, &m)) return 1;
    encdec = m.cfg.arch == MHE_ARCH_ENCDEC;
    if (!read_text(o.tokens, &text, &len)) { mhe_model_free(&m); return 1; }
    p = (char *)realloc(text, len + 1);
    if (!p) { free(text); mhe_model_free(&m); return die("grad: out of memory%s%s", "", ""); }
    text = p;
    text[len] = 0;
    if ((p = (char *)memchr(text, 0, len)) != NULL) {   /* the parser would stop there and run a shorter batch */
        fprintf(stderr, "mhe: %s: NUL byte at offset %zu: a token file is text\n", o.tokens, (size_t)(p - text));
        free(text);
        mhe_model_free(&m);
        return 1;
    }
    if (word_model(&m)) {
        rc = grad_words(&o, &m, text);
        free(text);
        mhe_model_free(&m);
        return rc;
    }
    memset(&all, 0, sizeof all);
    for (p = text; ; ) {
        char *end;
        long v;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p == '\n' || *p == 0) {
            if (cur > 0) {
                int sw = cur_bar < 0 ? 0 : cur_bar, w = cur - sw;
                if (encdec != (cur_bar >= 0)) { fprintf(stderr, "mhe: %s: line %d: %s\n", o.tokens, line, encdec ? "an encoder-decoder model needs `SOURCE | DECODER` ids" : "`|` is only for encoder-decoder models"); goto out; }
                if (width >= 0 && (w != width || sw != src_w)) { fprintf(stderr, "mhe: %s: line %d has %d+%d ids, earlier lines %d+%d\n", o.tokens, line, sw, w, src_w, width); goto out; }
                width = w; src_w = sw; rows++; cur = 0; cur_bar = -1;
            }
            if (*p == 0) break;
            p++; line++;
            continue;
        }
        if (*p == '|') {
            if (cur_bar >= 0 || cur == 0) { fprintf(stderr, "mhe: %s: line %d: `|` must follow the source ids, once\n", o.tokens, line); goto out; }
            cur_bar = cur; p++;
            continue;
        }
        if (*p == '.' && (p[1] == 0 || strchr(" \t\r\n|", p[1]))) { v = -2; end = p + 1; }
        else {
            v = strtol(p, &end, 10);
            if (end == p || v < -1 || v > 2147483647L) { fprintf(stderr, "mhe: %s: line %d: bad token id near '%.10s'\n", o.tokens, line, p); goto out; }
        }
        if (!idline_push(&all, (int)v)) { fprintf(stderr, "mhe: out of memory\n"); goto out; }
        cur++;
        p = end;
    }
    if (rows == 0 || width < 2 || (encdec && src_w < 1)) { fprintf(stderr, "mhe: %s: needs at least one line of 2 or more token ids (and a source)\n", o.tokens); goto out; }
    B = rows; T = width - 1; Ts = src_w;
    tok = (int *)malloc((2 * (size_t)B * T + (size_t)B * Ts + 2 * (size_t)B) * sizeof(int));
    if (!tok) { fprintf(stderr, "mhe: out of memory\n"); goto out; }
    tgt = tok + (size_t)B * T; src = tgt + (size_t)B * T; lens = src + (size_t)B * Ts; slens = lens + B;
    for (b = 0; b < B; b++) {
        const int *row = all.v + (size_t)b * (Ts + width), *s = row, *d = row + Ts;
        lens[b] = real_len(d, T);
        slens[b] = real_len(s, Ts);
        if (lens[b] < 1 || real_len(d, width) < 0 || (encdec && slens[b] < 1)) {
            fprintf(stderr, "mhe: %s: sequence %d: padding `.` must come after at least one id, at the end\n", o.tokens, b + 1);
            goto out;
        }
        for (t = 0; t < Ts; t++) src[b * Ts + t] = s[t] == -2 ? 0 : s[t];
        for (t = 0; t < T; t++) { tok[b * T + t] = d[t] == -2 ? 0 : d[t]; tgt[b * T + t] = d[t + 1] == -2 ? -1 : d[t + 1]; }
    }
    memset(&bt, 0, sizeof bt);
    bt.B = B; bt.T = T; bt.tokens = tok; bt.targets = tgt; bt.lengths = lens;
    if (encdec) { bt.Ts = Ts; bt.src = src; bt.src_lengths = slens; }
    mhe_model_zero_grad(&m);
    if (mhe_model_forward_batch(&m, &bt, &loss) != MHE_OK || mhe_model_backward(&m) != MHE_OK || !grads_finite(&m) ||
        mhe_grads_save(&m, o.out) != MHE_OK) {
        fprintf(stderr, "mhe: %s\n", m.err);
    } else {
        printf("loss %.6f over %d x %d tokens; wrote %s\n", loss, B, T, o.out);
        rc = 0;
    }
out:
    free(tok); free(all.v); free(text);
    mhe_model_free(&m);
    return rc;
}

/* ---- inspect ------------------------------------------------------------ */

static int cmd_inspect(int argc, char **argv) {
    void *buf;
    size_t size;
    mhe_safetensors st;
    char err[MHE_ERR_LEN];
    int i, d;
    long long total = 0;
    if (argc < 3 || strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe inspect FILE.safetensors\nPrints the metadata and every tensor (name, dtype, shape) of a safetensors file.\n");
        return argc < 3 ? 2 : 0;
    }
    if (mhe_read_file(argv[2], &buf, &size, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 1; }
    if (mhe_st_parse(&st, buf, size, NULL) != MHE_OK) { fprintf(stderr, "mhe: %s: %s\n", argv[2], st.err); free(buf); return 1; }
    printf("%s: %zu bytes, %d tensors, %d metadata entries\n", argv[2], size, st.n_tensors, st.n_meta);
    for (i = 0; i < st.n_meta; i++) printf("  meta %-20s = %s\n", st.meta_keys[i], st.meta_values[i]);
    for (i = 0; i < st.n_tensors; i++) {
        static const char *dt[] = { "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL" };
        printf("  %-40s %-4s [", st.tensors[i].name, dt[st.tensors[i].dtype]);
        for (d = 0; d < st.tensors[i].ndim; d++) printf("%s%lld", d ? ", " : "", (long long)st.tensors[i].shape[d]);
        printf("]\n");
        if (strncmp(st.tensors[i].name, "optim.", 6) != 0 && st.tensors[i].dtype == MHE_DTYPE_F32) total += st.tensors[i].size;
    }
    printf("parameters (F32, without optimizer state): %lld\n", total);
    mhe_st_free(&st);
    free(buf);
    return 0;
}

/* ---- export ------------------------------------------------------------- */

/* a checkpoint's weights (no optimizer state) as a .safetensors file, or as a
   C header holding them in an array plus the arena bytes embedded inference
   needs (mhe_inference_memory_needed) */
/* can NAME, NAME_SIZE and the other macros stand in a C (or C++) file? */
static int c_identifier(const char *name) {
    static const char *reserved[] = { "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
        "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short",
        "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool",
        "class", "delete", "new", "namespace", "operator", "private", "protected", "public", "template", "this", "throw",
        "try", "catch", "virtual", "true", "false", "asm", "friend", "mutable", "typename", "using", "explicit", "export" };
    size_t i;
    if (!name[0] || strlen(name) > 200) return 0;
    for (i = 0; name[i]; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') || name[i] == '_' || (i && name[i] >= '0' && name[i] <= '9')))
            return 0;
    if (name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z'))) return 0;   /* reserved for the implementation */
    for (i = 0; i < sizeof reserved / sizeof reserved[0]; i++) if (strcmp(name, reserved[i]) == 0) return 0;
    return 1;
}

static int cmd_export(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_out f;
    size_t size = 0, w = 0, need = 0, i, n;
    unsigned char *buf;
    const char *name, *ext;
    int max_len, rc, group;
    if (!command_opts("export", argc, argv, &o, &rc)) return rc;
    name = o.name ? o.name : "mhe_model";
    if (!c_identifier(name)) { fprintf(stderr, "mhe: export: --name '%s' is not a C identifier (or is a keyword or reserved)\n", name); return 1; }
    if (given(&o, "n") && given(&o, "max_len")) { fprintf(stderr, "mhe: export: --n is --max_len: give one\n"); return 2; }
    if (given(&o, "group") && !o.quant_s) { fprintf(stderr, "mhe: export: --group sets the scales of --quant q8\n"); return 2; }
    if (o.name && !(strrchr(o.out, '.') && strcmp(strrchr(o.out, '.'), ".h") == 0)) {
        fprintf(stderr, "mhe: export: --name names the array of a C header (--out FILE.h)\n");
        return 2;
    }
    if (!check_output(&o, o.out, 0) || !load_model(o.model, &m)) return 1;
    rc = 1;
    /* every quantized row gets exactly the group asked for: a group that does not divide
       a row is refused; the default 32 becomes one scale per row (said) where it does not */
    group = given(&o, "group") ? (int)o.group : 32;
    if (o.quant_s && mhe_q8_group_check(&m, group) != MHE_OK) {
        if (given(&o, "group")) {
            fprintf(stderr, "mhe: export: --group %d: %s; give a divisor of every row width, or 0 for one scale per row\n", group,
                    m.err + (strncmp(m.err, "q8: ", 4) == 0 ? 4 : 0));
            mhe_model_free(&m);
            return 1;
        }
        printf("q8: the default group 32 does not divide every row (%s): one scale per row instead\n", m.err + 4);
        group = 0;
    }
    max_len = given(&o, "max_len") ? (int)o.max_len : given(&o, "n") ? (int)o.n_tokens : m.cfg.max_seq_len;
    buf = NULL;
    ext = strrchr(o.out, '.');
    /* the image in memory for a C header only: a .safetensors file is written
       tensor by tensor (q8: quantized as it is written) */
    if (o.quant_s) {   /* int8 weights: mhe_q8_checkpoint_write_mem */
        if (mhe_q8_checkpoint_size(&m, group, &size) != MHE_OK || (ext && strcmp(ext, ".h") == 0 && (!(buf = (unsigned char *)malloc(size)) ||
            mhe_q8_checkpoint_write_mem(&m, group, buf, size, &w) != MHE_OK))) {
            fprintf(stderr, "mhe: export: %s\n", m.err); free(buf); mhe_model_free(&m); return 1;
        }
    } else if (mhe_checkpoint_size(&m, NULL, &size) != MHE_OK || (ext && strcmp(ext, ".h") == 0 && (!(buf = (unsigned char *)malloc(size)) ||
        mhe_checkpoint_write_mem(&m, NULL, buf, size, &w) != MHE_OK))) { fprintf(stderr, "mhe: export: cannot serialise the model\n"); free(buf); mhe_model_free(&m); return 1; }
    if (ext && strcmp(ext, ".h") == 0) {
        size_t need_copy = 0;
        if (max_len > m.cfg.max_seq_len || mhe_inference_memory_needed(buf, size, max_len, MHE_LOAD_IN_PLACE, &need) != MHE_OK ||
            (!o.quant_s && mhe_inference_memory_needed(buf, size, max_len, 0, &need_copy) != MHE_OK)) {
            fprintf(stderr, "mhe: export: --max_len %d is outside [1, %d] (the model's max_seq_len)\n", max_len, m.cfg.max_seq_len);
            goto done;
        }
        if (!out_open(&f, o.out)) goto done;
        fprintf(f.f, "/* generated by `mhe export` from %s: the model's weights as a safetensors image */\n", o.model);
        fprintf(f.f, "#define %s_SIZE %zu\n#define %s_MAX_LEN %d\n", name, size, name, max_len);
        fprintf(f.f, "/* arena bytes of mhe_inference_memory_needed(%s, %s_SIZE, %d, flags): weights left in place, or copied */\n", name, name, max_len);
        fprintf(f.f, "#define %s_ARENA_BYTES %zu\n#define %s_ARENA_BYTES_COPY %zu%s\n", name, need, name, need_copy,
                o.quant_s ? "   /* q8 int8 weights: in place only */" : "");
        fprintf(f.f, "#if defined(__GNUC__)\n#define %s_ALIGN __attribute__((aligned(8)))   /* in-place weights need 4 */\n#else\n#define %s_ALIGN\n#endif\n", name, name);
        fprintf(f.f, "static const unsigned char %s[%zu] %s_ALIGN = {\n", name, size, name);
        for (i = 0, n = 0; i < size; i++) {   /* 24 bytes a line */
            fprintf(f.f, "%s%u,", n ? "" : "  ", buf[i]);
            if (++n == 24 || i + 1 == size) { fputc('\n', f.f); n = 0; }
        }
        fprintf(f.f, "};\n");
        if (!out_commit(&f)) goto done;
        printf("wrote %s: %zu bytes of weights; arena for inference with %d tokens: %zu bytes (weights in place), %zu (copied)\n",
               o.out, size, max_len, need, need_copy);
    } else {
        if (given(&o, "max_len") || given(&o, "n")) { fprintf(stderr, "mhe: export: --max_len sizes the arena of a C header (--out FILE.h)\n"); goto done; }
        if ((o.quant_s ? mhe_q8_checkpoint_save(&m, group, o.out) : mhe_checkpoint_save(&m, NULL, o.out)) != MHE_OK) {
            fprintf(stderr, "mhe: %s\n", m.err);
            goto done;
        }
        if (o.quant_s) printf("wrote %s: %zu bytes of weights (q8: int8 linear layers, %s)\n", o.out, size,
                              group ? "a float32 scale per group of weights along a row" : "a float32 scale per row");
        else printf("wrote %s: %zu bytes of weights\n", o.out, size);
    }
    rc = 0;
done:
    free(buf);
    mhe_model_free(&m);
    return rc;
}

/* ---- reparam --------------------------------------------------------------- */

typedef struct { double t0, last; } reparam_clock;

static void reparam_progress(void *ctx, const char *sublayer, const mhe_cp_result *r) {
    reparam_clock *c = (reparam_clock *)ctx;
    double t = now_s();
    if (r->iterations) printf("  %-20s relative error %.4g after %d ALS sweeps, %.3f s\n", sublayer, r->rel_error, r->iterations, t - c->last);
    else printf("  %-20s exact (D~ >= n d_h: W_Q, W_K copied), %.3f s\n", sublayer, t - c->last);
    fflush(stdout);
    c->last = t;
}

static int cmd_reparam(int argc, char **argv) {
    mhe_reparam_opts ro = mhe_reparam_opts_default();
    opts o;
    const char *model, *out;
    mhe_model src, dst;
    reparam_clock clk;
    mhe_status st;
    int rc, converted = 0;
    if (!command_opts("reparam", argc, argv, &o, &rc)) return rc;
    model = o.model; out = o.out;
    ro.dim = (int)o.dim;
    if (given(&o, "max_iter")) ro.max_iter = (int)o.max_iter;
    if (given(&o, "tol")) ro.tol = o.tol;
    if (given(&o, "seed")) ro.seed = o.seed;
    if (o.init_s) ro.init = strcmp(o.init_s, "random") == 0 ? MHE_CP_INIT_RANDOM : MHE_CP_INIT_SVD;
    if (!check_output(&o, out, 0) || !load_model(model, &src)) return 1;
    printf("reparametrising %s: mha -> collab with D~ = %d (n_heads %d x d_head %d = %d)\n", model, ro.dim, src.cfg.n_heads,
           mhe_config_d_head(&src.cfg), src.cfg.n_heads * mhe_config_d_head(&src.cfg));
    clk.t0 = clk.last = now_s();
    ro.progress = reparam_progress;
    ro.progress_ctx = &clk;
    st = mhe_model_reparam_collab(&dst, &src, &ro, NULL, &converted);
    if (st != MHE_OK) {
        fprintf(stderr, "mhe: %s\nnothing written\n", dst.err);
        mhe_model_free(&src);
        return 1;
    }
    if (mhe_model_check_finite(&dst) != MHE_OK) {   /* ALS on overflowing products: refused, never saved */
        fprintf(stderr, "mhe: reparam produced a %s\nnothing written\n", dst.err);
        mhe_model_free(&dst);
        mhe_model_free(&src);
        return 1;
    }
    printf("converted %d sublayers in %.3f s; parameters %lld -> %lld (%.1f%%)\n", converted, now_s() - clk.t0,
           (long long)src.n_params, (long long)dst.n_params, 100.0 * (double)dst.n_params / (double)src.n_params);
    st = mhe_checkpoint_save(&dst, NULL, out);
    if (st != MHE_OK) fprintf(stderr, "mhe: %s\n", dst.err);
    else printf("wrote %s\n", out);
    mhe_model_free(&dst);
    mhe_model_free(&src);
    return st == MHE_OK ? 0 : 1;
}

/* ---- compare ------------------------------------------------------------- */

static int compare_stop(void) { return stop_signal != 0; }

#ifdef MHE_CUDA
/* mhe compare --device cuda: each run's trainer is mhe train --device cuda's (device_trainer) */
typedef struct { mhe_cuda_model dev; mhe_cuda_trainer gpu; } compare_gpu;

static int compare_gpu_check(const mhe_config *c, char *err) { return mhe_cuda_supports(c, err) == MHE_OK; }

static void *compare_gpu_open(mhe_model *m, const mhe_train_config *tc, const char *resume, mhe_trainer **t, char *err) {
    compare_gpu *g = (compare_gpu *)calloc(1, sizeof *g);
    const char *where;
    char e[MHE_ERR_LEN];
    if (!g) { snprintf(err, MHE_ERR_LEN, "out of memory"); return NULL; }
    if (!device_trainer(&g->dev, &g->gpu, m, tc, MHE_CUDA_FP32, resume, NULL, &where, e)) {
        cmp_err(err, "%s: %s", where, e);
        free(g);
        return NULL;
    }
    *t = &g->gpu.host;
    return g;
}

/* a failed step's reason where the CPU trainer's would be */
static mhe_status compare_gpu_said(compare_gpu *g, mhe_status st) {
    if (st != MHE_OK && !g->gpu.host.err[0]) snprintf(g->gpu.host.err, sizeof g->gpu.host.err, "%s", g->dev.err);
    return st;
}

static mhe_status compare_gpu_step(void *h, const int *data, size_t n) {
    compare_gpu *g = (compare_gpu *)h;
    return compare_gpu_said(g, mhe_cuda_trainer_step(&g->gpu, data, n));
}

static mhe_status compare_gpu_step_cls(void *h, const mhe_text_set *set) {
    compare_gpu *g = (compare_gpu *)h;
    return compare_gpu_said(g, mhe_cuda_trainer_step_cls(&g->gpu, set));
}

static int compare_gpu_sync(void *h, char *err) {
    compare_gpu *g = (compare_gpu *)h;
    if (mhe_cuda_trainer_sync(&g->gpu) == MHE_OK) return 1;
    snprintf(err, MHE_ERR_LEN, "%s", g->dev.err);   /* where the device's calls leave their reason (as sync_device reads it) */
    return 0;
}

static void compare_gpu_close(void *h) {
    compare_gpu *g = (compare_gpu *)h;
    mhe_cuda_trainer_free(&g->gpu);
    mhe_cuda_model_free(&g->dev);
    free(g);
}

static const compare_device compare_cuda = { "cuda", compare_gpu_check, compare_gpu_open, compare_gpu_step, compare_gpu_step_cls,
                                             compare_gpu_sync, compare_gpu_close };
#endif

static int cmd_compare(int argc, char **argv) {
    opts o;
    compare_opts co;
    char err[MHE_ERR_LEN];
    int rc;
    if (!command_opts("compare", argc, argv, &o, &rc)) return rc;
    memset(&co, 0, sizeof co);
    co.task = !o.task || strcmp(o.task, "lm") == 0 ? COMPARE_LM : COMPARE_CLS;
    {   /* flags of the other task would be ignored */
        static const char *lm_only[] = { "data", "batches" }, *cls_only[] = { "pretrain", "train", "test", "pretrain-fields" };
        size_t i;
        for (i = 0; co.task == COMPARE_CLS && i < sizeof lm_only / sizeof *lm_only; i++)
            if (given(&o, lm_only[i])) { fprintf(stderr, "mhe: compare: --%s is a flag of --task lm\n", lm_only[i]); return 2; }
        for (i = 0; co.task == COMPARE_LM && i < sizeof cls_only / sizeof *cls_only; i++)
            if (given(&o, cls_only[i])) { fprintf(stderr, "mhe: compare: --%s is a flag of --task cls and pairs\n", cls_only[i]); return 2; }
    }
    if (o.tokenizer && o.subwords) { fprintf(stderr, "mhe: compare: give --tokenizer or --subwords, not both\n"); return 2; }
    if (model_given(&o, "attn") || model_given(&o, "layout")) { fprintf(stderr, "mhe: compare: the kinds come from --kinds, not --attn or --layout\n"); return 2; }
    co.data = o.data; co.valid = o.valid; co.pretrain = o.pretrain; co.train = o.train_set; co.test = o.test;
    co.tokenizer = o.tokenizer; co.subwords = (int)o.subwords; co.kinds = o.kinds;
    co.seeds = given(&o, "seeds") ? (int)o.seeds : 3;
    co.seed = o.tc.seed;
    co.init_seed = given(&o, "init-seed") ? o.init_seed : o.tc.seed;
    co.cfg = o.cfg;
    if (co.task == COMPARE_CLS && !model_given(&o, "arch") && !o.config_path) co.cfg.arch = MHE_ARCH_ENCODER;
    co.tc = o.tc;
    co.pre = o.tc;
    if (o.pre_fields) {   /* "key=value ..." over the common train fields */
        char *copy = (char *)malloc(strlen(o.pre_fields) + 1), *p, *q;
        int ok = copy != NULL;
        if (copy) strcpy(copy, o.pre_fields);
        for (p = copy; ok && p && *p; p = q) {
            char *eq;
            while (*p == ' ') p++;
            if (!*p) break;
            q = strchr(p, ' ');
            if (q) *q++ = 0;
            if (!(eq = strchr(p, '='))) { fprintf(stderr, "mhe: --pretrain-fields: '%s' is not KEY=VALUE\n", p); ok = 0; break; }
            *eq = 0;
            if (mhe_train_config_set(&co.pre, p, eq + 1, err) != MHE_OK) { fprintf(stderr, "mhe: --pretrain-fields %s: %s\n", p, err); ok = 0; }
        }
        free(copy);
        if (!ok) return 2;
    }
    if (mhe_train_config_validate(&co.tc, err) != MHE_OK || (co.task == COMPARE_CLS && mhe_train_config_validate(&co.pre, err) != MHE_OK)) {
        fprintf(stderr, "mhe: compare: train settings: %s\n", err);
        return 1;
    }
    co.batches = given(&o, "batches") ? (int)o.batches : 0;
    co.baseline = o.baseline ? o.baseline : "mha";
    co.reference = o.reference ? o.reference : "sha";
    co.pairs = o.pairs;
    co.jobs = given(&o, "jobs") ? (int)o.jobs : 0;
    co.threads = (int)o.threads;
    co.out = o.out;
    co.quiet = o.quiet;
    co.stop = compare_stop;
#ifdef MHE_CUDA
    if (o.cuda) {   /* no device is one line before anything is read or trained */
        char name[256];
        int major = 0, minor = 0;
        if (mhe_cuda_device(name, sizeof name, &major, &minor, err) != MHE_OK) { fprintf(stderr, "mhe: compare: --device cuda: %s\n", err); return 1; }
        if (!o.quiet) printf("device: %s (compute capability %d.%d)\n", name, major, minor);
        co.device = &compare_cuda;
    }
#endif
    stop_asks = 1;   /* a first signal lets the runs in flight save their step */
    rc = compare_run(&co, err);
    stop_asks = 0;
    if (rc == COMPARE_STOPPED) {
        int sig = stop_signal ? stop_signal : SIGINT;
        fprintf(stderr, "mhe: compare: stopped by %s; every run in flight saved its step: the same command resumes the study in %s\n",
                signal_name(sig), o.out);
        return exit_status_of(sig);
    }
    if (rc != COMPARE_OK) { fprintf(stderr, "mhe: compare: %s\n", err); return rc == COMPARE_USAGE ? 2 : 1; }
    return 0;
}

/* stdout is an output too: a full disk or a size limit there is an error */
static int finish_stdout(int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "mhe: cannot write to standard output: %s\n", strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    static const struct { const char *name; int (*run)(int, char **); } cmds[] = {
        { "init", cmd_init }, { "train", cmd_train }, { "eval", cmd_eval }, { "generate", cmd_generate }, { "grad", cmd_grad },
        { "inspect", cmd_inspect }, { "params", cmd_params }, { "export", cmd_export }, { "hash", cmd_hash }, { "reparam", cmd_reparam },
        { "tokenize", cmd_tokenize }, { "import", cmd_import }, { "logits", cmd_logits }, { "compare", cmd_compare },
    };
    const char *cmd = argc > 1 ? argv[1] : "--help";
    size_t i;
    /* a file-size limit then fails the write with EFBIG, which every save reports,
       instead of killing the process midway */
#ifdef SIGXFSZ
    signal(SIGXFSZ, SIG_IGN);
#endif
    catch_signals();
#ifdef _WIN32
    _setmode(_fileno(stdout), _O_BINARY);   /* generated bytes as they are: no CR before each LF */
#endif
    for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmd, cmds[i].name) == 0) return finish_stdout(cmds[i].run(argc, argv));
    printf("mhe %s - train and run parameter-efficient transformers\n"
           "usage: mhe COMMAND [options]   (mhe COMMAND --help for each)\n"
           "  init       create a model file from a config\n"
           "  train      train a byte-level LM on a text file, with checkpoints and resume\n"
           "  eval       loss and perplexity of a model on a text file\n"
           "  generate   sample text with a KV cache\n"
           "  grad       loss and every parameter gradient of one batch, as safetensors\n"
           "  inspect    list the metadata and tensors of a safetensors file\n"
           "  params     parameter and memory tables of the attention kinds (MHE paper)\n"
           "  export     weights only, as safetensors or as a C array for embedded inference\n"
           "  hash       how a word model embeds words (row, bucket or bits)\n"
           "  tokenize   byte-level BPE: train a tokenizer, encode, decode, read a tokenizer.json\n"
           "  reparam    turn a trained model's mha layers into collaborative ones (CP decomposition)\n"
           "  import     a Hugging Face GPT-2 or BERT directory to an mhe model\n"
           "  logits     the logits of one sequence of token ids\n"
           "  compare    the study of attention kinds on your data: runs per kind and seed, a report\n"
           "train, eval, generate and compare run on an NVIDIA GPU with --device cuda (build/cuda/mhe: make cuda).\n", MHE_VERSION);
    return strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ? 0 : 2;
}
