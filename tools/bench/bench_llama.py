"""mhe against llama.cpp on the same GPT-2 (124M, random weights), side by side
in one run: load time, time to the first token, time per token at 1 and 2
threads, peak RSS, greedy token ids compared; float32 (F32) and int8 (mhe q8
against ggml Q8_0).

    python3 tools/bench/bench_llama.py [--python PY] [--threads 1,2] [--n 128] [--repeats 3]

Everything it makes lives under build/ (nothing of llama.cpp is committed):
  build/gpt2/hf                 tools/bench/make_gpt2.py under PY (torch, transformers)
  build/gpt2/gpt2.safetensors   `mhe import`, and gpt2_q8.safetensors by `mhe export --quant q8`
  build/gpt2/gpt2-*.gguf        tools/bench/gguf_gpt2.py under PY (the gguf package)
  build/llama/                  llama.cpp from the llama-cpp-python source distribution on
                                PyPI (`pip download --no-binary`; it vendors llama.cpp), built
                                with cmake: libllama only, -DGGML_NATIVE=ON, OpenMP, Release
  build/llama_decode, build/mhe_decode   the two drivers (tools/bench/llama/llama_decode.c, tools/bench/mhe_decode.c), one JSON line each
PY defaults to ./.venv/bin/python; it needs torch, transformers, safetensors,
numpy and gguf (pip install torch transformers gguf). Each measurement runs
each side `repeats` times, alternating, after one untimed run that puts the
files in the page cache; the table gives the best (fastest, smallest) of
each. The last lines are a Markdown table for docs/performance.md."""
import glob, json, os, platform, subprocess, sys, tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B = os.path.join(ROOT, "build")
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]

def sh(cmd, **kw):
    print("+ " + (cmd if isinstance(cmd, str) else " ".join(cmd)), flush=True)
    return subprocess.run(cmd, shell=isinstance(cmd, str), check=True, cwd=ROOT, **kw)

def opt(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

def llama_build(py):
    src = glob.glob(os.path.join(B, "llama", "llama_cpp_python-*", "vendor", "llama.cpp"))
    if not src:
        os.makedirs(os.path.join(B, "llama"), exist_ok=True)
        sh([py, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", os.path.join(B, "llama"), "llama-cpp-python"])
        tarfile.open(glob.glob(os.path.join(B, "llama", "llama_cpp_python-*.tar.gz"))[0]).extractall(os.path.join(B, "llama"))
        src = glob.glob(os.path.join(B, "llama", "llama_cpp_python-*", "vendor", "llama.cpp"))
    src = src[0]
    cm = os.path.join(B, "llama", "cmake")
    if not os.path.exists(os.path.join(cm, "src", "libllama.a")):
        sh(["cmake", "-S", src, "-B", cm, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
            "-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON", "-DGGML_OPENMP=ON"], stdout=subprocess.DEVNULL)
        sh(["cmake", "--build", cm, "--target", "llama", "-j", str(os.cpu_count() or 2)], stdout=subprocess.DEVNULL)
    libs = [os.path.join(cm, "src", "libllama.a")] + sorted(glob.glob(os.path.join(cm, "ggml", "src", "libggml*.a")), key=lambda p: ("base" in p, p))
    sh(["g++", "-O2", "-x", "c", os.path.join(ROOT, "tools", "bench", "llama", "llama_decode.c"), "-x", "none", "-I", os.path.join(src, "include"),
        "-I", os.path.join(src, "ggml", "include"), "-o", os.path.join(B, "llama_decode")] + libs + libs + ["-fopenmp", "-lpthread", "-lm"])
    ver = os.path.basename(os.path.dirname(os.path.dirname(src))).replace("llama_cpp_python-", "llama-cpp-python ")
    return ver

def models(py):
    g = os.path.join(B, "gpt2")
    if not os.path.exists(os.path.join(g, "hf", "model.safetensors")):
        sh([py, "tools/bench/make_gpt2.py", os.path.join(g, "hf")])
    if not os.path.exists(os.path.join(g, "gpt2.safetensors")):
        sh(["build/mhe", "import", os.path.join(g, "hf"), "--out", os.path.join(g, "gpt2.safetensors")], stdout=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(g, "gpt2_q8.safetensors")):
        sh(["build/mhe", "export", "--model", os.path.join(g, "gpt2.safetensors"), "--quant", "q8", "--out", os.path.join(g, "gpt2_q8.safetensors")])
    for q in ("f32", "q8_0"):
        if not os.path.exists(os.path.join(g, "gpt2-%s.gguf" % q)):
            sh([py, "tools/bench/gguf_gpt2.py", os.path.join(g, "hf"), os.path.join(g, "gpt2-%s.gguf" % q)] + (["--q8_0"] if q == "q8_0" else []))
    return g

def run(cmd):
    out = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])

def main():
    py = opt("--python", os.path.join(ROOT, ".venv", "bin", "python"))
    threads = [int(t) for t in opt("--threads", "1,2").split(",")]
    n, reps = int(opt("--n", "128")), int(opt("--repeats", "3"))
    sh("make build/mhe", stdout=subprocess.DEVNULL)
    sh("cc -O2 -march=native -std=c99 -fopenmp -I. -o build/mhe_decode tools/bench/mhe_decode.c -lm")
    ver = llama_build(py)
    g = models(py)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    gcc = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    sizes = {k: os.path.getsize(os.path.join(g, f)) for k, f in
             (("mhe F32", "gpt2.safetensors"), ("mhe q8", "gpt2_q8.safetensors"), ("llama F32", "gpt2-f32.gguf"), ("llama Q8_0", "gpt2-q8_0.gguf"))}
    rows = []
    for fmt, mf, lf, kv in (("F32", "gpt2.safetensors", "gpt2-f32.gguf", "f32"), ("Q8_0 / q8", "gpt2_q8.safetensors", "gpt2-q8_0.gguf", "f32")):
        for t in threads:
            mcmd = ["build/mhe_decode", os.path.join(g, mf), str(t), str(n)] + [str(i) for i in PROMPT]
            lcmd = ["build/llama_decode", os.path.join(g, lf), str(t), str(n), kv] + [str(i) for i in PROMPT]
            run(mcmd); run(lcmd)   # the files into the page cache
            res = {"mhe": [], "llama": []}
            for _ in range(reps):
                res["mhe"].append(run(mcmd)); res["llama"].append(run(lcmd))
            best = {k: {f: min(r[f] for r in v) for f in ("load_s", "first_token_s", "us_per_token", "peak_rss_kb")} for k, v in res.items()}
            a, b = res["mhe"][0]["ids"], res["llama"][0]["ids"]
            agree = next((i for i in range(len(a)) if a[i] != b[i]), len(a)) - len(PROMPT)
            row = dict(fmt=fmt, threads=t, mhe=best["mhe"], llama=best["llama"], agree=agree, n=n)
            print("JSON " + json.dumps(row), flush=True)
            rows.append(row)
    print("\nCPU: %s, %d cores here; %s; %s (llama.cpp vendored, libllama built -O3 Release, GGML_NATIVE, OpenMP); "
          "mhe %s, `make` flags; prompt of %d ids, %d greedy tokens; KV cache float32 on both sides; best of %d runs each, "
          "files in the page cache" % (cpu, os.cpu_count(), gcc, ver, "0.1", len(PROMPT), n, reps))
    print("files: " + ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in sizes.items()))
    print("\n| weights | threads | load s (mhe / llama.cpp) | first token s (mhe / llama.cpp) | ms per token (mhe / llama.cpp) "
          "| mhe tokens/s / llama.cpp's | peak RSS MB (mhe / llama.cpp) | greedy ids equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        m, l = r["mhe"], r["llama"]
        print("| %s | %d | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2fx | %.0f / %.0f | %s |" % (
            r["fmt"], r["threads"], m["load_s"], l["load_s"], m["first_token_s"], l["first_token_s"], m["us_per_token"] / 1e3,
            l["us_per_token"] / 1e3, l["us_per_token"] / m["us_per_token"], m["peak_rss_kb"] / 1e3, l["peak_rss_kb"] / 1e3,
            "all %d" % r["n"] if r["agree"] >= r["n"] else "first %d of %d" % (r["agree"], r["n"])))

if __name__ == "__main__":
    main()
