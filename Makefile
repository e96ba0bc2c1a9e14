# mhe - build the examples, tools and tests. Everything generated goes to build/.
#   make              examples and tools (build/)
#   make run          train the main example on the bundled corpus, then generate text
#   make reproduce    mhe compare on the bundled corpus: the separation study, docs/compare.md (hours; REPRO_* variables)
#   make reproduce-downstream  mhe compare --task cls: pretrain -> fine-tune -> test per kind and seed, docs/downstream.md (hours)
#   make test         every test; ends with "N passed, N failed" (T=test_q8: one test)
#   make test-sanitize  the same tests under AddressSanitizer + UBSan
#   make test-fastmath  the same tests built with -O3 -march=native -ffast-math
#   make OPENMP=0     build without OpenMP (one thread, the pragmas compile away)
#   make fuzz         every libFuzzer target for FUZZ_TIME seconds (default 60; clang)
#   make test-m32 / test-aarch64 / test-windows / build-cortex-m4   portability builds (docs/testing.md)
#   make test-cortex-m4  the q8 tiny LM on a Cortex-M4 under qemu-system-arm, token for token against x86
#   make cuda / test-cuda  the CUDA companion built by nvcc / its kernels executed on the CPU
#   make gpu-check OUT=DIR  on a machine with an NVIDIA GPU: the CUDA companion built, tested, sanitized,
#                     trained against the CPU and benchmarked there; a report in DIR (docs/cuda.md)
#   make gpu-check-build  on any machine with nvcc: gpu-check's binaries, for make gpu-check PREBUILT=1
#   make web          the browser page (docs/web.md) in build/web/: the library as WebAssembly (clang, wasi-libc)
#   make docs         regenerate every generated table of README.md and docs/ (tests/test_guide.py checks them)
CC      ?= cc
OPT     ?= -O2 -march=native
WARN    = -Wall -Wextra -pedantic -std=c99
OPENMP  ?= 1
ifeq ($(OPENMP),1)
OMPFLAG = -fopenmp
endif
CFLAGS  ?=
ALLFLAGS = $(OPT) $(WARN) $(OMPFLAG) $(CFLAGS) -I.
LDLIBS  = -lm
B       = build
EXE     ?=
# runs the build's own programs where make needs them (the embedded example's model header)
RUN     ?=

# tools/ by role: cli/ (the mhe tool: mhe.c + mhe_params.c, and its headers),
# bench/ (one program per .c: the benchmarks and studies), python/ (the
# PyTorch twin), scripts/ (docs, kernel budget, gpu-check)
TOOLS    = $(B)/mhe$(EXE) $(patsubst tools/bench/%.c,$(B)/%$(EXE),$(wildcard tools/bench/*.c))
EXAMPLES = $(patsubst examples/%.c,$(B)/examples/%$(EXE),$(wildcard examples/*.c))
TESTS    = $(patsubst tests/%.c,$(B)/tests/%$(EXE),$(wildcard tests/test_*.c))
DEPS     = mhe.h $(wildcard tools/cli/*.h tools/bench/*.h)

all: $(TOOLS) $(EXAMPLES)

$(B)/%$(EXE): tools/bench/%.c $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ $< $(LDLIBS) $(if $(filter $(B)/bench_gemm$(EXE),$@),$(BLASFLAGS) $(DLFLAGS),)

# mhe is two translation units: mhe.c (with the library implementation) and mhe_params.c
$(B)/mhe$(EXE): tools/cli/mhe.c tools/cli/mhe_params.c $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ tools/cli/mhe.c tools/cli/mhe_params.c $(LDLIBS) -lpthread

$(B)/examples/%$(EXE): examples/%.c $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ $< $(LDLIBS)

# its main runs the study of mhe compare (tools/cli/mhe_compare.h), whose runs are threads
$(B)/examples/my_attention$(EXE): examples/my_attention.c $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -o $@ $< $(LDLIBS) -lpthread

# the embedded example compiles its model in, as a C array `mhe export` writes
$(B)/examples/embedded$(EXE): examples/embedded.c $(B)/tiny_lm_model.h $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -I$(B) -o $@ $< $(LDLIBS)

$(B)/tiny_lm_model.h: examples/data/tiny_lm.safetensors $(B)/mhe$(EXE)
	$(RUN) $(B)/mhe$(EXE) export --model $< --out $@ --name tiny_lm --n 64

# each test is one file: with MHE_STATIC (every function static) the compiler
# drops the library functions a test does not call before optimising them,
# which halves the build of every flavour's tests (the tool, the examples and
# the benchmarks keep the extern functions users link)
TESTFLAGS = -DMHE_STATIC
$(B)/tests/%$(EXE): tests/%.c tests/test.h $(wildcard tests/fuzz/*.h) $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(TESTFLAGS) -o $@ $< $(LDLIBS)

# test_numerics links the same kernels built twice: -fno-fast-math and -ffast-math
$(B)/tests/test_numerics$(EXE): tests/test_numerics.c tests/numerics_kernels.c tests/numerics_kernels.h tests/test.h $(DEPS)
	@mkdir -p $(B)/tests $(B)/obj
	$(CC) $(ALLFLAGS) -fno-fast-math -DNUM_SUFFIX=_std -c -o $(B)/obj/numerics_std.o tests/numerics_kernels.c
	$(CC) $(ALLFLAGS) -ffast-math -DNUM_SUFFIX=_fast -c -o $(B)/obj/numerics_fast.o tests/numerics_kernels.c
	$(CC) $(ALLFLAGS) $(TESTFLAGS) -o $@ $< $(B)/obj/numerics_std.o $(B)/obj/numerics_fast.o $(LDLIBS)

# bench_gemm links OpenBLAS when its header is installed (apt-get install libopenblas-dev)
BLASFLAGS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c -include cblas.h - -o /dev/null -lopenblas >/dev/null 2>&1 && echo "-DMHE_BENCH_OPENBLAS -lopenblas")
# and loads MKL at run time with dlopen, which glibc before 2.34 keeps in libdl
DLFLAGS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -o /dev/null -ldl >/dev/null 2>&1 && echo "-ldl")

run: all
	./$(B)/examples/train_tiny_lm

# make reproduce: the separation study of docs/kinds.md, `mhe compare` on the bundled
# corpus: every MHE-paper kind, REPRO_SEEDS seeds each (weights from seed 42 + s,
# batches from 5 + s), at a budget where mha and sha separate beyond the seed spread.
# The defaults took 92 minutes on 2 cores (24 runs of 4.1 M tokens; docs/compare.md
# has the results); never part of make test. Writes build/reproduce/compare/ (report.md,
# report.json, curves.csv, SVG plots); a stopped study resumes where it stopped.
# REPRO_BPE=N: the same study on a byte-level BPE of N tokens (the same steps of 16 x 128
# tokens), in build/reproduce/compare_bpeN/. REPRO_JOBS: runs at once (threads split).
REPRO_BPE     ?= 0
REPRO_STEPS   ?= 2000
REPRO_SEEDS   ?= 3
REPRO_D_MODEL ?= 128
REPRO_HEADS   ?= 8
REPRO_LAYERS  ?= 4
REPRO_THREADS ?= 2
REPRO_JOBS    ?= 2
REPRO_KINDS   ?= mha,sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul
reproduce: $(B)/mhe$(EXE)
	@mkdir -p build/reproduce
	./$(B)/mhe$(EXE) compare --data examples/data/train.txt --valid examples/data/valid.txt --kinds $(REPRO_KINDS) \
	    --seeds $(REPRO_SEEDS) --seed 5 --init-seed 42 --d_model $(REPRO_D_MODEL) --n_heads $(REPRO_HEADS) \
	    --n_layers $(REPRO_LAYERS) --kv_groups $$(( $(REPRO_HEADS) % 2 ? 1 : 2 )) --max_seq_len 128 --seq_len 128 --batch 16 \
	    --steps $(REPRO_STEPS) --lr 2e-3 --min_lr 2e-4 --warmup $$(( $(REPRO_STEPS) / 20 )) --threads $(REPRO_THREADS) --jobs $(REPRO_JOBS) \
	    $(if $(filter-out 0,$(REPRO_BPE)),--subwords $(REPRO_BPE) --out build/reproduce/compare_bpe$(REPRO_BPE),--out build/reproduce/compare)

# make reproduce-downstream: the papers' downstream protocol, `mhe compare --task cls|pairs` on
# the task tools/scripts/downstream_task.py builds from Debian's fortunes package: the MHE
# paper's 8 kinds x 3 seeds (seed s: 1 + s), each a masked-LM encoder pretrained (1500 steps),
# fine-tuned (600) and tested; resumes where a stopped study left off. Writes
# build/downstream/TASK[-bpeN]/ (docs/downstream.md). DOWNSTREAM_TASK=pairs the pair task (does B
# continue A?), DOWNSTREAM_BPE=N byte-level BPE tokens, DOWNSTREAM_KINDS, DOWNSTREAM_SEEDS,
# DOWNSTREAM_PRE_STEPS and DOWNSTREAM_STEPS for a quick look; never part of make test.
DOWNSTREAM_TASK      ?= cls
DOWNSTREAM_BPE       ?= 0
DOWNSTREAM_KINDS     ?= mha,sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul
DOWNSTREAM_SEEDS     ?= 3
DOWNSTREAM_PRE_STEPS ?= 1500
DOWNSTREAM_STEPS     ?= 600
DOWNSTREAM_THREADS   ?= 2
DOWNSTREAM_JOBS      ?= 2
DOWNSTREAM_DIR        = build/downstream/task$(if $(filter pairs,$(DOWNSTREAM_TASK)),/pairs)
reproduce-downstream: $(B)/mhe$(EXE)
	@mkdir -p build/downstream
	@[ -f build/downstream/task/task.json ] || python3 tools/scripts/downstream_task.py build/downstream/task
	@[ "$(DOWNSTREAM_TASK)" != pairs ] || [ -f build/downstream/task/pairs/task.json ] || \
	    python3 tools/scripts/downstream_task.py --pairs build/downstream/task
	python3 tools/scripts/downstream_task.py --check build/downstream/task
	./$(B)/mhe$(EXE) compare --task $(DOWNSTREAM_TASK) --pretrain build/downstream/task/pretrain.txt \
	    --train $(DOWNSTREAM_DIR)/train.tsv --valid $(DOWNSTREAM_DIR)/valid.tsv --test $(DOWNSTREAM_DIR)/test.tsv \
	    --kinds $(DOWNSTREAM_KINDS) --seeds $(DOWNSTREAM_SEEDS) --seed 1 --d_model 128 --n_heads 4 --n_layers 4 --max_seq_len 128 \
	    --kv_groups 2 --steps $(DOWNSTREAM_STEPS) --batch 16 --seq_len 128 --lr 3e-4 --warmup $$(( $(DOWNSTREAM_STEPS) / 10 )) \
	    --min_lr 0 --eval_every 100 --pretrain-fields "steps=$(DOWNSTREAM_PRE_STEPS) lr=1e-3 warmup=$$(( $(DOWNSTREAM_PRE_STEPS) / 15 )) min_lr=1e-4" \
	    --threads $(DOWNSTREAM_THREADS) --jobs $(DOWNSTREAM_JOBS) $(if $(filter-out 0,$(DOWNSTREAM_BPE)),--subwords $(DOWNSTREAM_BPE)) \
	    --out build/downstream/$(DOWNSTREAM_TASK)$(if $(filter-out 0,$(DOWNSTREAM_BPE)),-bpe$(DOWNSTREAM_BPE))

# make test T=test_q8 (or T='test_cli*', T=test_twin.py): only the tests that match
test: all $(TESTS)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} MHE_TEST_ONLY='$(T)' sh tests/run.sh

test-sanitize:
	$(MAKE) B=build/san OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" OPENMP=0 CFLAGS="-DMHE_ARENA_DEBUG -DMHE_TEST_QUICK" tool-tests build/san/examples/my_attention
	MHE_TEST_BUILD=build/san MHE_TEST_PYTHON=sanitize MHE_TEST_JOBS=2 sh tests/run.sh

test-fastmath:
	$(MAKE) B=build/fast OPT="-O3 -march=native -ffast-math" tool-tests build/fast/examples/my_attention
	OMP_NUM_THREADS=1 MHE_TEST_BUILD=build/fast MHE_TEST_PYTHON=flavour MHE_TEST_JOBS=2 sh tests/run.sh

all-tests: $(TESTS) $(TOOLS)

# the mhe tool, the examples and the tests, without the benchmarks (what
# tests/run.sh runs: the build flavours below need no more)
tool-examples-tests: $(B)/mhe$(EXE) $(EXAMPLES) $(TESTS)

# the mhe tool and the tests: a cross build whose examples the host cannot run, and
# the sanitizer and fast-math builds, which add the one example a test runs
# (my_attention, through test_compare); the 32-bit and Windows builds keep every
# example (their portability), clang's check-syntax reads them all
tool-tests: $(B)/mhe$(EXE) $(TESTS)

# every C file through the compiler's front end with the build's flags
# (-Werror in CI): clang's warnings all come from its front end, so
# -fsyntax-only reports what a full clang build would, at a fraction of its
# time. The mhe tool is built for real (it writes the embedded example's model).
SYNTAX_SRCS = $(wildcard tools/cli/*.c tools/bench/*.c tools/web/*.c examples/*.c tests/test_*.c) tests/numerics_kernels.c
check-syntax: $(SYNTAX_SRCS:%.c=$(B)/syntax/%.ok)
	@echo "check-syntax: $(words $(SYNTAX_SRCS)) files, no warnings"

$(B)/syntax/%.ok: %.c $(DEPS) $(wildcard tests/*.h tests/fuzz/*.h) $(B)/tiny_lm_model.h
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) -I$(B) -DNUM_SUFFIX=_std $(filter -D%,$(BLASFLAGS)) -fsyntax-only $< && touch $@

# the header as C++, included twice, and with MHE_STATIC; no warnings allowed;
# each subset build (comma-separated switches) computes what the full library does
SUBSETS = MHE_NO_TRAIN MHE_NO_TRAIN,MHE_NO_STDIO MHE_NO_TOKENIZERS MHE_NO_TRAIN,MHE_NO_TOKENIZERS,MHE_NO_STDIO
check-build:
	@mkdir -p $(B)
	$(CXX) -std=c++11 -O1 -Wall -Wextra -Werror -I. -o $(B)/build_cpp tests/build_cpp.cpp -lm && ./$(B)/build_cpp
	$(CC) -std=c99 -O1 -Wall -Wextra -pedantic -Werror -I. -o $(B)/build_static tests/build_static.c -lm && ./$(B)/build_static
	$(CC) -std=c99 -O1 -Wall -Wextra -pedantic -Werror -DMHE_NO_STDIO -I. -c -o $(B)/build_nostdio.o tests/build_static.c
	$(CC) -std=c99 -O1 -Wall -Wextra -pedantic -Werror -DMHE_NO_TRAIN -DMHE_NO_STDIO -I. -c -o $(B)/build_notrain_static.o tests/build_static.c
	@mkdir -p $(B)/subset
	$(CC) -std=c99 -O1 -Wall -Wextra -pedantic -Werror -I. -o $(B)/subset/full tests/build_subset.c -lm
	./$(B)/subset/full write $(B)/subset && ./$(B)/subset/full check $(B)/subset
	@for d in $(SUBSETS); do \
	    echo "$(CC) ... -D$$d tests/build_subset.c"; \
	    $(CC) -std=c99 -O1 -Wall -Wextra -pedantic -Werror $$(echo $$d | sed 's/^/-D/; s/,/ -D/g') -I. \
	        -o $(B)/subset/$$d tests/build_subset.c -lm && ./$(B)/subset/$$d check $(B)/subset || exit 1; \
	done
	@echo "check-build: ok"

# ---- portability builds (CI installs the compilers; see docs/testing.md)
# 32-bit x86: gcc -m32 (Debian: gcc-12-multilib; its asm/ headers come from the
# 64-bit include directory, because gcc-multilib, which links them, conflicts
# with the Debian cross compilers); the whole suite, Python checks included,
# but test_train's three long training runs (make test and test-fastmath have them)
test-m32:
	$(MAKE) B=build/m32 CC="gcc -m32" CFLAGS="-idirafter /usr/include/x86_64-linux-gnu -DMHE_TEST_SHORT_TRAIN" tool-examples-tests
	OMP_NUM_THREADS=1 MHE_TEST_BUILD=build/m32 MHE_TEST_PYTHON=flavour MHE_TEST_JOBS=2 sh tests/run.sh

# 64-bit Arm: static aarch64-linux-gnu-gcc binaries under qemu-aarch64-static,
# the quick suite (MHE_TEST_QUICK); the Python checks run the Arm mhe tool too
AARCH64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64-static
test-aarch64:
	$(MAKE) B=build/aarch64 CC=$(AARCH64_CC) OPT=-O2 OPENMP=0 CFLAGS="-static -DMHE_TEST_QUICK" tool-tests
	printf '#!/bin/sh\nexec $(QEMU_AARCH64) "$$(dirname "$$0")/mhe" "$$@"\n' > build/aarch64/mhe-qemu && chmod +x build/aarch64/mhe-qemu
	MHE_TEST_BUILD=build/aarch64 MHE_TEST_RUNNER=$(QEMU_AARCH64) MHE_BIN=build/aarch64/mhe-qemu MHE_TEST_PYTHON=flavour MHE_TEST_JOBS=2 sh tests/run.sh

# Windows x86-64: static .exe files from x86_64-w64-mingw32-gcc (Debian:
# gcc-mingw-w64-x86-64), run under wine (Debian: wine, wine64) in a prefix of
# its own, build/win/wineprefix (no display needed). The tool, the examples and
# the C tests (MHE_TEST_QUICK; not the benchmarks, to save build time), without
# OpenMP: mingw's libgomp creates a Windows semaphore per parallel region, a
# wineserver round trip each (test_model, one thread: 104 s against 8);
# test_gemm and test_train run again with OpenMP at 1 and 2 threads.
# clock_gettime comes from mingw's winpthread library (-lpthread).
# The Python checks are skipped (they drive POSIX paths: FIFOs, symlinks, ulimit).
MINGW_CC ?= x86_64-w64-mingw32-gcc
WINE     ?= wine
WINE_ENV  = WINEPREFIX=$(CURDIR)/build/win/wineprefix WINEDEBUG=-all
WIN_FLAGS = -O2 -march=native -Wall -Wextra -pedantic -std=c99 -static -Werror -DMHE_TEST_QUICK -I.
test-windows:
	@mkdir -p build/win/tests
	@[ -d build/win/wineprefix ] || { echo "creating the wine prefix build/win/wineprefix"; $(WINE_ENV) $(WINE) wineboot --init >/dev/null 2>&1; }
	$(MAKE) B=build/win CC=$(MINGW_CC) EXE=.exe RUN="$(WINE_ENV) $(WINE)" OPT="-O2 -march=native" OPENMP=0 LDLIBS="-lm -lpthread" \
	    CFLAGS="-static -Werror -DMHE_TEST_QUICK" tool-examples-tests build/win/tests/test_gemm_openmp.exe build/win/tests/test_train_openmp.exe
	$(WINE_ENV) MHE_TEST_BUILD=build/win MHE_TEST_RUNNER=$(WINE) MHE_TEST_PYTHON=0 sh tests/run.sh

build/win/tests/test_%_openmp.exe: tests/test_%.c tests/test.h $(DEPS)
	$(MINGW_CC) $(WIN_FLAGS) $(TESTFLAGS) -fopenmp -o $@ $< -lm

# Cortex-M4 bare metal (arm-none-eabi-gcc, newlib, nosys): compile and link
# examples/embedded.c (inference from a static buffer, so MHE_NO_TRAIN); prints
# the image size and the largest stack frames; nothing runs
M4_FLAGS = -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16
build-cortex-m4: $(B)/tiny_lm_model.h
	@mkdir -p build/m4
	arm-none-eabi-gcc $(M4_FLAGS) -DMHE_NO_STDIO -DMHE_NO_TRAIN -DMHE_NO_TOKENIZERS -ffreestanding -std=c99 -Wall -Wextra -pedantic -Werror -Os \
	    -ffunction-sections -fdata-sections -fstack-usage -I. -I$(B) -c -o build/m4/embedded.o examples/embedded.c
	arm-none-eabi-gcc $(M4_FLAGS) --specs=nosys.specs -Wl,--gc-sections -o build/m4/embedded.elf build/m4/embedded.o -lm
	arm-none-eabi-size build/m4/embedded.elf
	@echo "largest stack frames (bytes):"; sort -t '	' -k2 -n build/m4/embedded.su | tail -n 4 | sed 's/^.*:\([a-z_0-9.]*\)	\([0-9]*\).*/  \1 \2/'

# Cortex-M4 that runs: examples/embedded.c with the q8 tiny model in flash, the
# startup code and memory map of examples/m4/ for qemu's mps2-an386, newlib-nano
# (semihosting for output and exit), greedy decoding; tests/test_cortex_m4.sh runs
# it under qemu-system-arm and compares its tokens with the x86 build's
M4_RUN_FLAGS = $(M4_FLAGS) -std=c99 -Wall -Wextra -pedantic -Werror -Os -ffunction-sections -fdata-sections \
               -DMHE_NO_STDIO -DMHE_NO_TRAIN -DMHE_NO_TOKENIZERS $(M4_TEST_DEFS)
# greedy, and a prompt from the validation text whose per-byte argmax is compared too
M4_TEST_DEFS = -DEMBEDDED_TEMPERATURE=0 -DEMBEDDED_PREDICTIONS '-DEMBEDDED_PROMPT="Paul, a servant of Jesus Christ, called to be "'
$(B)/q8/tiny_lm_model.h: examples/data/tiny_lm.safetensors $(B)/mhe
	@mkdir -p $(dir $@)
	$(B)/mhe export --model $< --quant q8 --out $@ --name tiny_lm --n 64

$(B)/m4/embedded_q8.elf: examples/embedded.c examples/m4/startup.c examples/m4/mps2_an386.ld $(B)/q8/tiny_lm_model.h mhe.h
	@mkdir -p $(dir $@)
	arm-none-eabi-gcc $(M4_RUN_FLAGS) -DEMBEDDED_M4 -I. -I$(B)/q8 -T examples/m4/mps2_an386.ld -nostartfiles \
	    --specs=nano.specs --specs=nosys.specs -Wl,--gc-sections -o $@ examples/embedded.c examples/m4/startup.c -lm

# the x86 build of the same program and model, the reference the M4's tokens must match
$(B)/m4/embedded_q8_host: examples/embedded.c $(B)/q8/tiny_lm_model.h $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(ALLFLAGS) $(M4_TEST_DEFS) -I$(B)/q8 -o $@ $< $(LDLIBS)

$(B)/q8/tiny_lm_q8.safetensors: examples/data/tiny_lm.safetensors $(B)/mhe
	@mkdir -p $(dir $@)
	$(B)/mhe export --model $< --quant q8 --out $@

test-cortex-m4: $(B)/m4/embedded_q8.elf $(B)/m4/embedded_q8_host $(B)/q8/tiny_lm_q8.safetensors
	sh tests/test_cortex_m4.sh $(B)

# ---- fuzzing: clang's libFuzzer with ASan + UBSan; targets in tests/fuzz/fuzz.h
FUZZ_TIME    ?= 60
FUZZ_CC      ?= clang
FUZZ_TARGETS  = safetensors checkpoint trainer config corpus
FUZZ_FLAGS    = -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -std=c99 -Wall -Wextra -Werror -I.

build/fuzz/fuzz_%: tests/fuzz/fuzz_main.c tests/fuzz/fuzz.h mhe.h
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -DFUZZ_NAME='"$*"' -o $@ $< -lm

fuzz-build: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)

fuzz: $(FUZZ_TARGETS:%=fuzz-run-%)

fuzz-run-%: build/fuzz/fuzz_%
	@sh tests/fuzz/run.sh $* $(FUZZ_TIME)

# regenerate the committed seed files (after a format change); never part of a build
fuzz-seeds:
	@mkdir -p $(B)
	$(CC) -O1 -std=c99 -I. -o $(B)/make_seeds tests/fuzz/make_seeds.c -lm && ./$(B)/make_seeds tests/fuzz/seeds

# ---- the CUDA companion (mhe_cuda.cuh) ---------------------------------------
# make cuda: everything built by nvcc for sm_80 and sm_90 (+ compute_90 PTX),
# warnings and spills as errors, then the kernels' registers and shared memory
# checked against tools/scripts/cuda_budget.txt (nothing runs: no GPU here).
# make gpu-check: the real run on a GPU machine (below).
# make test-cuda: the same kernels compiled as C++ through tests/cuda/emu.h and
# executed on the CPU (fibers in both orders, blocks at once and threads under
# ThreadSanitizer, threads under ASan + UBSan), then the deliberately broken
# variants, which must be caught.
NVCC        ?= nvcc
CUDA_ARCH   ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVFLAGS      = -std=c++17 -O2 -I. -DMHE_CUDA $(CUDA_ARCH) --Werror all-warnings \
               -Xptxas -v,-warn-spills,-warn-lmem-usage -Xcompiler -Wall,-Wextra,-Werror
CUDA_DEPS    = mhe.h mhe_cuda.cuh $(wildcard tools/cli/*.h tools/bench/*.h)
EMU_CXX     ?= clang++
EMU_FLAGS    = -std=c++20 -g -I. -DMHE_CUDA_EMULATE -include tests/cuda/emu.h -Wall -Wextra -Werror

cuda: $(B)/cuda/mhe $(B)/cuda/bench_cuda $(B)/cuda/test_cuda $(B)/cuda/test_attn
	python3 tools/scripts/cuda_budget.py $(B)/cuda/ptxas.log tools/scripts/cuda_budget.txt

# the tool instantiates every kernel: its ptxas report is the one the budget checks
$(B)/cuda/mhe: tools/cli/mhe.c tools/cli/mhe_params.c $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -x cu -o $@ tools/cli/mhe.c tools/cli/mhe_params.c > $(B)/cuda/ptxas.log 2>&1 || (cat $(B)/cuda/ptxas.log; rm -f $@; exit 1)
	@grep -v 'ptxas info\|bytes stack frame' $(B)/cuda/ptxas.log || true

$(B)/cuda/bench_cuda: tools/bench/bench_cuda.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< > $@.log 2>&1 || (cat $@.log; rm -f $@; exit 1)

# the emulation's test programs, built for the GPU (without one they say so and exit 3)
$(B)/cuda/test_%: tests/cuda/test_%.cpp tests/cuda/test_device.h tests/test.h $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -x cu -o $@ $< > $@.log 2>&1 || (cat $@.log; rm -f $@; exit 1)

# the table of kernel resources in docs/cuda.md (make docs writes it there)
cuda-budget-table: $(B)/cuda/mhe
	python3 tools/scripts/cuda_budget.py $(B)/cuda/ptxas.log tools/scripts/cuda_budget.txt --table

# make docs: every generated table, where it lives: the kind table (README.md) and the
# reading guide (docs/kinds.md) from mhe.h; the last real GPU run's results (docs/cuda.md)
# and the README's GPU paragraph from docs/gpu/ (tools/scripts/gpu_results.py); the CUDA kernel table (docs/cuda.md) from
# ptxas's report, so only where nvcc is installed (elsewhere it is left as it is, and
# tests/test_guide.py still checks it names every kernel of tools/scripts/cuda_budget.txt)
docs:
	python3 tools/scripts/reading_guide.py --write
	python3 tools/scripts/gpu_results.py --write
	@if command -v $(NVCC) >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory $(B)/cuda/mhe && \
	    python3 tools/scripts/cuda_budget.py $(B)/cuda/ptxas.log tools/scripts/cuda_budget.txt --update docs/cuda.md; \
	else echo "docs: no $(NVCC): the CUDA kernel table in docs/cuda.md is left as it is"; fi

test-cuda:
	EMU_CXX="$(EMU_CXX)" EMU_FLAGS="$(EMU_FLAGS)" B="$(B)/emu" sh tests/cuda/run.sh

# make gpu-check OUT=DIR: on a machine with an NVIDIA GPU, everything above for
# real (tools/scripts/gpu_check.py: the tests, training against the CPU through
# the CUDA graph, the benchmark, compute-sanitizer); DIR gets four files: the
# report (gpu-check.md, .json), every log (gpu-check-logs.tar.gz) and the loss
# curves. BUDGET=SECONDS (default 450) bounds the whole run, ONLY=STEP,... runs
# some steps, BENCH=full times every size, PREBUILT=1 uses what make
# gpu-check-build made (else it builds for the GPU's own architecture). The
# script's status: 0 all passed, 1 a step failed, 3 no GPU (nothing run); make
# turns any nonzero status into its own 2 and names it ("Error 3").
OUT ?= build/gpu-check/report
GPU_CHECK_FLAGS = $(if $(BUDGET),--budget $(BUDGET)) $(if $(ONLY),--only $(ONLY)) $(if $(BENCH),--bench $(BENCH)) \
                  $(if $(PREBUILT),--prebuilt)
gpu-check:
	@sh tools/scripts/gpu_check.sh $(GPU_CHECK_FLAGS) $(OUT)

# make gpu-check-build: every binary gpu-check runs, built where there is no GPU
# (nvcc for sm_80 and sm_90 + compute_90 PTX, static CUDA runtime, the CPU mhe for
# any x86-64-v3 processor rather than this one), within the kernel budget, and
# stamped with the hash of its sources, so gpu-check --prebuilt uses them only
# with the tree they were built from. About 31 MB: small enough to send with the tree.
PREBUILT_B = $(B)/gpu-check/prebuilt
gpu-check-build:
	$(MAKE) --no-print-directory B=$(PREBUILT_B) OPT="-O2 -march=x86-64-v3" cuda $(PREBUILT_B)/mhe
	python3 tools/scripts/gpu_check.py --stamp $(PREBUILT_B)

# ---- the browser page (docs/web.md) -----------------------------------------
# make web: build/web/ is a static page (index.html, app.js, worker.js, text.js,
# mhe_wasm.js) that runs opened from disk or from any static server, with no
# network. The library is tools/web/mhe_web.c built by clang for wasm32-wasi
# over Debian's wasi-libc (apt-get install clang lld wasi-libc
# libclang-rt-14-dev-wasm32), no OpenMP, with the 128-bit SIMD of the browsers
# (-msimd128 and mhe.h's SIMD128 GEMM kernel: 3 times the steps per second of WEB_SIMD=0, same bits). The
# module and the bundled text travel as base64 in scripts: Chromium fetches
# nothing by URL from file:// pages, scripts excepted.
WEB_CC      ?= clang
WEB_SYSROOT ?= /usr
WEB_SIMD    ?= 1
WEB_OUT     ?= $(B)/web
WEB_TEXT    ?= examples/data/train.txt
WEB_TEXT_KIB = 64
WEB_CFLAGS   = --target=wasm32-wasi --sysroot=$(WEB_SYSROOT) -O2 $(if $(filter 1,$(WEB_SIMD)),-msimd128) \
               -mexec-model=reactor $(WARN) -Werror -Wl,--strip-all
WEB_PAGE     = $(WEB_OUT)/index.html $(WEB_OUT)/app.js $(WEB_OUT)/worker.js $(WEB_OUT)/text.js $(WEB_OUT)/mhe_wasm.js

web: $(WEB_PAGE)
	@echo "make web: $(WEB_OUT)/index.html ($$(cat $(WEB_PAGE) | wc -c) bytes)"

# every make web asks the compiler first (a tenth of a second), so a missing
# toolchain is one line that says what to install, also when the page is built
web-toolchain:
	@mkdir -p $(WEB_OUT)-obj
	@printf 'int main(void){return 0;}\n' > $(WEB_OUT)-obj/probe.c
	@$(WEB_CC) --target=wasm32-wasi --sysroot=$(WEB_SYSROOT) -o $(WEB_OUT)-obj/probe.wasm $(WEB_OUT)-obj/probe.c 2>/dev/null || \
	    { echo "make web: $(WEB_CC) cannot build for wasm32-wasi here (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"; exit 2; }

$(WEB_OUT)-obj/mhe.wasm: tools/web/mhe_web.c mhe.h | web-toolchain
	$(WEB_CC) $(WEB_CFLAGS) -o $@ $<

$(WEB_OUT)/mhe_wasm.js: $(WEB_OUT)-obj/mhe.wasm | web-toolchain
	@mkdir -p $(dir $@)
	{ printf 'var MHE_WASM_B64 = "'; base64 -w0 $<; printf '";\n'; } > $@

$(WEB_OUT)/text.js: $(WEB_TEXT)
	@mkdir -p $(dir $@)
	{ printf 'var MHE_TEXT_NAME = "King James Bible, from Genesis 1";\nvar MHE_TEXT_B64 = "'; \
	  head -c $$(($(WEB_TEXT_KIB) * 1024)) $< | base64 -w0; printf '";\n'; } > $@

$(WEB_OUT)/%: tools/web/%
	@mkdir -p $(dir $@)
	cp $< $@

# tests/test_gemm.c as a WASI program with the page's flags: tests/test_web.py
# runs it in the browser (the SIMD128 micro-kernel against double precision)
$(WEB_OUT)-obj/test_gemm.wasm: tests/test_gemm.c tests/test.h mhe.h | web-toolchain
	$(WEB_CC) $(filter-out -mexec-model=reactor,$(WEB_CFLAGS)) -D_WASI_EMULATED_SIGNAL -o $@ $< -lwasi-emulated-signal

# the page's C side built natively with the scalar kernel and no contraction
# into FMA (wasm has none): tests/test_web.py holds the page's numbers against it
$(B)/web-native/web_native: tools/web/web_native.c tools/web/mhe_web.c mhe.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -ffp-contract=off -DMHE_NO_SIMD $(WARN) -o $@ tools/web/web_native.c -lm

clean:
	rm -rf build

.PHONY: all run reproduce reproduce-downstream test test-sanitize test-fastmath all-tests tool-examples-tests tool-tests check-syntax check-build clean fuzz fuzz-build fuzz-seeds test-m32 test-aarch64 test-windows build-cortex-m4 test-cortex-m4 \
        cuda cuda-budget-table test-cuda gpu-check gpu-check-build docs web web-toolchain
