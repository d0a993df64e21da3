# One entry point for set-up, tests, lint, benchmarks and images.
# `make images` builds and verifies the standard CPU image (`PLATFORM=linux/arm64`: its arm64
# twin, under emulation); `make image-cuda CUDA=13.2` a CUDA one; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch's pip requirement for the venv; empty: scripts/setup_venv.py's (the release the tests use).
TORCH_SPEC ?=
PYTEST_ARGS ?=
# make test's workers (pytest-xdist): much of the suite waits on the engine, the compilers'
# files and subprocesses, so more workers than cores keep both cores busy (docs/testing.md).
TEST_WORKERS ?= 4
STAMP := $(VENV)/.installed

.PHONY: setup system-deps docker standins test parity test-fast test-slow lint format bench bench-images images \
        image-cuda update-pull matrix cuda-check hip-check compat catalog-check e2e-cuda gpu-proof clean \
        stable-abi-proof stable-abi-images stable-abi-bake

setup: $(STAMP)

# The venv is reused across runs; it is refreshed when the package metadata changes.
$(STAMP): pyproject.toml
	$(PYTHON) scripts/setup_venv.py --venv '$(VENV)' --torch '$(TORCH_SPEC)'
	touch $@

system-deps:
	bash scripts/system-deps.sh

docker: system-deps
	bash scripts/ensure-docker.sh

# linux/amd64 (the default) or linux/arm64, or both (linux/amd64,linux/arm64: one image index):
# the platforms of `make standins` and `make images`.
# arm64 runs here under Debian's qemu-user-static (scripts/system-deps.sh registers it).
PLATFORM ?= linux/amd64
comma := ,

# `imagegen standins` (imagegen/building/standins/): the CPU stand-ins, cached by tag and recipe revision.
standins: setup docker
	for p in $(subst $(comma), ,$(PLATFORM)); do $(VENV)/bin/imagegen standins --platform $$p || exit; done

# Every tier that can run here: unit, kernels, loader, CUDA device-code compile (when nvcc
# is present), and the Docker integration tier. Set-up installs every package the tests use, so
# IMAGEGEN_STRICT_SKIPS=1 turns a skip for a missing package or engine into a failure
# (tests/conftest.py): what is left skipped is hardware (a GPU, AVX-512) or the slow tier.
test: setup docker
	IMAGEGEN_STRICT_SKIPS=1 $(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The parity tests against DeepSpeed itself (DeepSpeed JIT-builds its CPU ops and async_io first,
# about 7 minutes on 2 cores): the slow tier's share that `make test` leaves out; docs/deepspeed.md.
parity: setup
	IMAGEGEN_STRICT_SKIPS=1 SLOW=1 $(PY) -m pytest -ra tests/kernels/test_deepspeed_parity_optim.py \
	  tests/kernels/test_deepspeed_parity_aio.py $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

# The slow tier alone (the tests marked slow: registry pushes, the arm64 image under qemu, every
# GPU source through hipcc and the arm64 host compiler, DeepSpeed parity, ...): long, not in CI;
# docs/testing.md lists each with what the default tier keeps of it, and their last result.
test-slow: setup docker
	IMAGEGEN_STRICT_SKIPS=1 SLOW=1 $(PY) -m pytest -ra -m slow $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check op_builder imagegen kernels scripts
	$(VENV)/bin/mypy op_builder imagegen kernels scripts

format: setup
	$(VENV)/bin/ruff format op_builder imagegen kernels tests bench scripts
	$(VENV)/bin/ruff check --fix .

bench: setup
	$(PY) bench/cpu_optim.py
	$(PY) bench/cpu_optim_state.py
	$(PY) bench/load_time.py
	$(PY) bench/gpu_optim.py
	$(PY) bench/gpu_transformer.py
	$(PY) bench/gpu_quantizer.py

# The image targets' rules (which ops, which torch and index, for which platform or CUDA) are in
# scripts/images.py; these variables pass through, and an empty one takes its default there.
# WHEELHOUSE: local amd64 torch wheels (default /opt/wheels when present; for an arm64 image, the
# build machine's own CPU torch); CA_CERT: the CA bundle that HTTPS through an intercepting proxy
# needs (default the system's, when present).
WHEELHOUSE ?=
CA_CERT ?=
# IMAGE_OPS: default our CPU ops. PLATFORM=linux/arm64: torch ARM64_TORCH (default 2.10.0, PyPI's
# newest aarch64 CPU build) fetched into ARM64_WHEELHOUSE; ARM64_IMAGE_OPS default IMAGE_OPS. arm64
# images are cross-compiled and keep every op: under emulation async_io's self-test is reported
# not checkable (qemu-user has no Linux AIO), not failed.
IMAGE_OPS ?=
# PUSH=REGISTRY/NAME:TAG: push there after verification, the SBOM and provenance as OCI referrers
# (several platforms: each platform's image, then one image index under the tag).
PUSH ?=
ARM64_TORCH ?=
ARM64_WHEELHOUSE ?=
ARM64_IMAGE_OPS ?=

# The standard CPU image, from the stand-in bases (no registry needed), verified; for
# PLATFORM=linux/arm64 cross-compiled, then verified (load + self-tests) under emulation: slow,
# not in CI.
images: setup standins
	$(PY) scripts/images.py cpu --platform '$(PLATFORM)' --ops '$(IMAGE_OPS)' --wheelhouse '$(WHEELHOUSE)' \
	  --ca-cert '$(CA_CERT)' --arm64-torch '$(ARM64_TORCH)' --arm64-wheelhouse '$(ARM64_WHEELHOUSE)' --arm64-ops '$(ARM64_IMAGE_OPS)' \
	  --push '$(PUSH)'

# A CUDA image of our GPU ops from the CUDA stand-ins (`imagegen standins --cuda X.Y`; CUDA=12.4:
# Debian trixie's nvidia-cuda-toolkit; CUDA=13.0, the default: this machine's toolkit; another
# 13.x: NVIDIA's compiler wheels of exactly that release), for the catalog's default arch list of
# that CUDA unless CUDA_ARCH names one, with torch's matching build on PyPI (CUDA_TORCH; 12.4:
# 2.6.0; 13.x: 2.15.0, a CUDA 13.2 build; arm64: 2.11.0) from the index this machine's pip installs from
# (scripts/pip_index.py), so a corporate mirror works as it is. CUDA_TORCH_INDEX (or
# IMAGEGEN_TORCH_INDEX) names another index; CUDA_IMAGE_OPS picks some ops. Several GB to
# download, and ~30 GB of disk with the build cache (`docker builder prune` gives it back). Not
# in CI. Figures (cold build, compile seconds per op, sizes) in docs/benchmarks.md.
# PLATFORM=linux/arm64: the arm64 image (GH200, GB200, GB300, DGX Spark), cross-compiled here.
CUDA ?=
CUDA_TORCH ?=
CUDA_TORCH_INDEX ?= $(IMAGEGEN_TORCH_INDEX)
CUDA_ARCH ?=
CUDA_IMAGE_OPS ?=
image-cuda: setup docker
	$(PY) scripts/images.py cuda --cuda '$(CUDA)' --arch '$(CUDA_ARCH)' --torch '$(CUDA_TORCH)' \
	  --torch-index '$(CUDA_TORCH_INDEX)' --ops '$(CUDA_IMAGE_OPS)' --ca-cert '$(CA_CERT)' \
	  --platform '$(PLATFORM)' --wheelhouse '$(WHEELHOUSE)'

# Image figures: runtime/devel size of the CPU and the CUDA image, and the rebuild ratio.
bench-images: setup standins
	$(VENV)/bin/imagegen standins --cuda 13.0
	$(PY) bench/image_size.py
	$(PY) bench/image_size.py --bytecode all
	$(PY) bench/image_size.py --bytecode none
	$(PY) bench/image_size.py --cuda
	$(PY) bench/rebuild.py

# What an update costs a node holding the previous image (docs/benchmarks.md): CPU image pairs
# through a local registry (an op changed, an op added, a cold-cache rebuild). BEFORE=DIR: also
# the same with another checkout's imagegen (e.g. `git worktree add DIR <commit>`).
BEFORE ?=
# CUDA=13.0: CUDA image pairs of fused_adam / fused_lion for sm_90 instead (the CUDA stand-ins,
# torch 2.15.0's CUDA build from pip's index: a few GB, as `make image-cuda`).
update-pull: setup standins
	if [ -n "$(CUDA)" ]; then $(VENV)/bin/imagegen standins --cuda $(CUDA); fi
	$(PY) bench/update_pull.py --label after $(if $(CUDA),--cuda $(CUDA))
	if [ -n "$(BEFORE)" ]; then $(PY) bench/update_pull.py --label before --imagegen-root "$(BEFORE)"; fi
	$(PY) bench/verify_time.py

matrix: setup
	$(VENV)/bin/imagegen matrix

# OP_SOURCES: op package folders whose GPU ops are checked too (make cuda-check OP_SOURCES=examples/acme_ops).
# HOST=aarch64: the .cu files' host side compiled for an arm64 (Grace) host, with Debian's cross g++.
OP_SOURCES ?=
HOST ?=
cuda-check: setup
	$(PY) scripts/cuda_check.py $(foreach dir,$(OP_SOURCES),--op-source $(dir)) $(if $(HOST),--host $(HOST))

hip-check: setup system-deps
	HIP_PLATFORM=amd $(PY) scripts/hip_check.py

# Every op compiled against every torch minor the catalog admits (headers read out of each
# torch wheel on pip's index, cached) and its device code with every nvcc / hipcc here or in a
# CUDA stand-in image; results in imagegen/data/compat.json, tables in docs/compat.md. Long
# (an hour or more cold on 2 cores); a re-run compiles only what changed. CI runs --sample.
# TORCH=X.Y[.Z],...: only those torch versions' host code (the catalog's minors, or a release it
# does not know yet, as catalog-check names it: X.Y is the newest X.Y.* on the index, X.Y.Z that
# one; it gets the CPU ops and the GPU bindings, and its row in docs/compat.md admits no target).
# INDEX_URL=URL reads the wheels from another index than pip's. Exit 3: the index cannot be read.
COMPAT_JOBS ?= 1
TORCH ?=
compat: setup
	nice -n 10 $(PY) scripts/compat.py --jobs $(COMPAT_JOBS) $(if $(TORCH),--torch '$(TORCH)') \
	  $(if $(INDEX_URL),--index-url '$(INDEX_URL)')

# The catalog against what the package index publishes now (pip's index; INDEX_URL=URL another):
# new torch releases and minors, new CUDA releases, stale defaults. Exit 1 when the catalog lacks
# something, 3 when the index cannot be read. Live, so not in CI (its tests use recorded answers).
INDEX_URL ?=
catalog-check: setup
	$(VENV)/bin/imagegen catalog --check-upstream $(if $(INDEX_URL),--index-url '$(INDEX_URL)')

# One stable build of the CPU optimizer ops (the venv's torch) loads and computes right on another
# torch release too: installed in a venv of each, verify, the symbol check and the kernel tests
# against torch pass on the same module bytes. STABLE_TORCH: the other release (default 2.10.0;
# the first run fetches it and its CUDA wheels, ~3 GB, into build/stable-abi-venvs, kept). 2.5 to 4.5
# minutes warm; the report in bench/results/stable_abi_proof.json, the result in docs/benchmarks.md.
# STABLE_REVISION=REV: build and test that git revision (e.g. HEAD), not the working tree.
STABLE_TORCH ?= 2.10.0
STABLE_REVISION ?=
stable-abi-proof: setup
	$(PY) scripts/stable_abi_proof.py --torch '$(STABLE_TORCH)' $(if $(STABLE_REVISION),--revision '$(STABLE_REVISION)')

# Two CUDA images of one target with different torch releases (STABLE_IMAGES_TORCH, default
# 2.14.1,2.15.0: PyPI's CUDA 13.0 and 13.2 builds, several GB each from pip's index) carry the same
# op modules, byte for byte in one layer, and the second build compiles nothing (a compile cache in a
# Redis started for the run counts it). About half an hour and ~20 GB of build cache
# (`docker builder prune` gives it back); the report in bench/results/stable_abi_images.json, the
# result in docs/benchmarks.md.
STABLE_IMAGES_TORCH ?= 2.14.1,2.15.0
stable-abi-images: setup docker
	$(VENV)/bin/imagegen standins --cuda 13.0
	$(PY) scripts/stable_abi_images.py --torch '$(STABLE_IMAGES_TORCH)'

# The same through one `imagegen bake --torch-releases` (the catalog's archs: a longer compile).
stable-abi-bake: setup docker
	$(VENV)/bin/imagegen standins --cuda 13.0
	$(PY) scripts/stable_abi_images.py --bake --torch '$(STABLE_IMAGES_TORCH)'

e2e-cuda:
	bash scripts/e2e_cuda.sh

# On a machine with an NVIDIA GPU, torch with CUDA and nvcc (no Docker): JIT-build the GPU ops
# from this checkout, run tests/gpu, the self-tests, compute-sanitizer and the GPU benchmarks.
# Logs in build/gpu-proof; STEPS picks some of: env build test selftest preflight cpu sanitize bench
# profile candidates (kernel variants beside the current code: CANDIDATES="op:DEFINE:bench_script").
STEPS ?=
gpu-proof:
	PYTHON=$(if $(wildcard $(PY)),$(PY),python3) bash scripts/gpu_proof.sh $(STEPS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The CPU ops on CPUs other than this one: self-tests natively and under qemu-x86_64 as a
# Nehalem (scalar path) and a Haswell (AVX2 path), from one native build. About 2 minutes warm.
.PHONY: portability
portability: setup
	bash scripts/portability.sh
