#!/usr/bin/env bash
# The GPU proof, from a checkout on a machine with an NVIDIA GPU, torch with CUDA and nvcc
# (no Docker needed): the ops are JIT-built from the working tree, then tested, sanitized
# and benchmarked. Every step's log lands in LOG_DIR (default build/gpu-proof).
#
#   bash scripts/gpu_proof.sh [STEP...]
#
# Steps: env build test selftest preflight cpu sanitize bench profile candidates. preflight builds one op
# ahead of time for this GPU and for another major and checks `python -m op_builder preflight`
# passes the one and refuses the other; profile runs each case of bench/gpu_profile.py under
# ncu (PROFILE_K: only cases whose name contains one of its words), one report per case in
# LOG_DIR/ncu. candidates measures kernel variants beside the current code in one run: each
# of CANDIDATES ("op:DEFINE:bench_script ...") is the op built with -DDEFINE (nvcc's
# NVCC_APPEND_FLAGS, in an extensions folder of its own), its GPU tests run on it, and its
# benchmark run for the current build and the candidate one after the other.
#
# Knobs (environment), times in seconds: TEST_TIMEOUT, CPU_TIMEOUT, BENCH_TIMEOUT, PROFILE_TIMEOUT
# (each case), PREFLIGHT_TIMEOUT, SANITIZE_TIMEOUT (each tool over each group of
# scripts/sanitize_cases.py), MEMCHECK_TIMEOUT (tests/gpu under memcheck); SANITIZE_TOOLS
# (default "memcheck racecheck synccheck initcheck"); SANITIZE_BUDGET (the whole sanitize step's
# seconds, default 560); SANITIZE_SPLIT (the tools whose runs are
# split by dtype too, default racecheck); SANITIZE_JOBS (sanitizer runs at once,
# default 10) and SANITIZE_WORKERS (pytest-xdist workers of the tests under memcheck, default 6);
# MEMCHECK_K (pytest -k of those tests); GPU_OPTIM_ARGS, GPU_TRANSFORMER_ARGS, GPU_QUANTIZER_ARGS.
#
# With no step named, all run in that order. EXT_CACHE (a tar of built .so files from an
# earlier run on the same paths) is unpacked before building and refreshed after, so a rerun
# recompiles only the ops whose sources changed.
set -uo pipefail
cd "$(dirname "$0")/.."

steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(env build test selftest preflight cpu sanitize bench profile)
known=" env build test selftest preflight cpu sanitize bench profile candidates "
for s in "${steps[@]}"; do  # every name checked before any step runs
    [[ $known == *" $s "* ]] || { echo "unknown step: $s (${known:1:-1})" >&2; exit 2; }
done

PY=${PYTHON:-python3}
LOG_DIR=${LOG_DIR:-build/gpu-proof}
EXT_CACHE=${EXT_CACHE:-}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/build/gpu-proof-ext}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
GPU_OPS=()  # the registry's GPU ops, listed by the first step that needs them (gpu_ops)
mkdir -p "$LOG_DIR" "$TORCH_EXTENSIONS_DIR"
status=0

step() { echo "=== $1 ($(date +%T))"; }
note_failure() { echo "!!! $1 failed (exit $2)"; status=1; }

# GPU_OPS as `python -m op_builder list --gpu` names them, asked of $PY (PYTHONPATH holds this
# checkout) once, by the first step that uses them: the other steps neither wait for it nor fail
# with it.
gpu_ops() {
    [[ ${#GPU_OPS[@]} -gt 0 ]] && return 0
    local listed
    listed=$("$PY" -m op_builder list --gpu) || return
    [[ -n $listed ]] || { echo "python -m op_builder list --gpu listed no op" >&2; return 1; }
    mapfile -t GPU_OPS <<<"$listed"
}

run_env() {
    step env
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
        nvcc --version | tail -2
        "$PY" scripts/gpu_proof.py env
        grep -m1 'model name' /proc/cpuinfo
        echo "cpus $(nproc)"
        grep -o -m1 -w 'avx512f\|avx512bw\|avx512_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '
        echo
        command -v compute-sanitizer ncu || true
        env | grep -E '^(TORCH_CUDA_ARCH_LIST|CUDA_HOME|CUDA_VISIBLE_DEVICES|MAX_JOBS|DS_)' || true
    } 2>&1 | tee "$LOG_DIR/env.txt"
}

run_build() {
    step build
    if [[ -n "$EXT_CACHE" && -f "$EXT_CACHE" ]]; then
        tar -xf "$EXT_CACHE" -C "$TORCH_EXTENSIONS_DIR" && echo "restored $(tar -tf "$EXT_CACHE" | wc -l) cached builds"
    fi
    gpu_ops || { note_failure "build (listing the GPU ops)" $?; return; }
    # Every op in its own process at once: their nvcc jobs share the cores.
    local pids=() op
    for op in "${GPU_OPS[@]}"; do
        MAX_JOBS=6 "$PY" scripts/gpu_proof.py load "$op" >"$LOG_DIR/build-$op.log" 2>&1 &
        pids+=($!)
    done
    local i=0
    for op in "${GPU_OPS[@]}"; do
        wait "${pids[$i]}" || note_failure "build $op" $?
        tail -3 "$LOG_DIR/build-$op.log"
        i=$((i + 1))
    done
    if [[ -n "$EXT_CACHE" ]]; then
        (cd "$TORCH_EXTENSIONS_DIR" && find . -name '*.so' -print0 | tar -czf "$EXT_CACHE" --null -T -)
        ls -l "$EXT_CACHE"
    fi
}

run_test() {
    step "test tests/gpu"
    timeout "${TEST_TIMEOUT:-300}" "$PY" -m pytest tests/gpu -q -ra -p no:cacheprovider --timeout 120 \
        --junitxml="$LOG_DIR/gpu-tests.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$LOG_DIR/gpu-tests.txt" | tail -40
    local rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || note_failure "tests/gpu" "$rc"
}

run_selftest() {
    step "selftest --device cuda"
    gpu_ops || { note_failure "selftest (listing the GPU ops)" $?; return; }
    "$PY" -m op_builder selftest "${GPU_OPS[@]}" --device cuda 2>&1 | tee "$LOG_DIR/selftest.txt"
    local rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || note_failure selftest "$rc"
}

run_preflight() {
    step "preflight: an op for this GPU, and for another major"
    timeout "${PREFLIGHT_TIMEOUT:-480}" "$PY" scripts/gpu_proof.py preflight --work "$PWD/build/gpu-proof-preflight" \
        2>&1 | tee "$LOG_DIR/preflight.txt"
    local rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || note_failure preflight "$rc"
}

run_profile() {
    # ncu's own clocks (--clock-control none) are the ones the benchmarks ran at.
    step "ncu: bench/gpu_profile.py"
    command -v ncu >/dev/null || { note_failure "profile (no ncu on PATH)" 127; return; }
    mkdir -p "$LOG_DIR/ncu"
    local case rc pick wanted
    for case in $("$PY" bench/gpu_profile.py --list); do
        wanted=${PROFILE_K:+no}
        for pick in ${PROFILE_K:-}; do [[ $case == *"$pick"* ]] && wanted=; done
        [[ -z $wanted ]] || continue
        timeout "${PROFILE_TIMEOUT:-120}" ncu --profile-from-start off --clock-control none \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
            "$PY" bench/gpu_profile.py "$case" >"$LOG_DIR/ncu/$case.txt" 2>&1
        rc=$?
        [[ $rc == 0 ]] || note_failure "profile $case" "$rc"
        echo "--- $case"
        grep -E '^  [^ ].*\(([0-9]+, ){2}[0-9]+\)x\(|^ +(Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread) ' \
            "$LOG_DIR/ncu/$case.txt" || tail -5 "$LOG_DIR/ncu/$case.txt"
    done
}

run_cpu() {
    # The AVX-512 paths and the CPU optimizer's thread scaling, where this CPU has AVX-512.
    step "cpu kernels (avx512)"
    timeout "${CPU_TIMEOUT:-240}" "$PY" -m pytest tests/kernels/test_cpu_optim.py tests/kernels/test_cpu_optim_half.py \
        tests/kernels/test_cpu_optim_layouts.py tests/kernels/test_cpu_optim_state_dtype.py tests/kernels/test_selftests.py \
        -q -ra -p no:cacheprovider -k "avx512 or levels or simd" 2>&1 | tee "$LOG_DIR/cpu-tests.txt" | tail -15
    local rc=${PIPESTATUS[0]} threads
    [[ $rc == 0 ]] || note_failure "cpu tests" "$rc"
    for threads in 1 4 8 16; do
        timeout 120 "$PY" bench/cpu_optim.py --size 16M --threads "$threads" --reps 11 \
            --out "$LOG_DIR/cpu_optim_t$threads.json" 2>&1 | tee -a "$LOG_DIR/cpu_optim.txt" | tail -12
    done
}

run_sanitize() {
    # Without torch's caching allocator every tensor is its own allocation, so an access past
    # a tensor's end lands outside any allocation and memcheck sees it, and initcheck sees a
    # read of memory nothing wrote.
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    # The sanitizers' cost is almost all on the host, so every run is its own process and they
    # share the cores: each tool over each group of scripts/sanitize_cases.py (every kernel
    # variant once, small shapes; under racecheck the whole test tier never finished in a device
    # session), and tests/gpu under memcheck in pytest-xdist workers. SANITIZE_TOOLS picks the
    # tools, SANITIZE_TIMEOUT bounds each case run, MEMCHECK_TIMEOUT the tests' run,
    # SANITIZE_JOBS how many case runs at once. Each run's log: LOG_DIR/sanitize/TOOL-GROUP.txt.
    local dir=$LOG_DIR/sanitize tool group groups parallel=() runs=()
    mkdir -p "$dir"
    groups=$("$PY" scripts/sanitize_cases.py --list-groups) || { note_failure "sanitize (listing the cases)" $?; return; }
    step "compute-sanitizer: ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck} over scripts/sanitize_cases.py; memcheck over tests/gpu"
    # The 4 GiB and 1M-column cases are left out of the tests: under memcheck each alone would
    # take much of the budget, and their kernels are the ones the other tests run (MEMCHECK_K:
    # pytest -k).
    "$PY" -c 'import xdist' 2>/dev/null && parallel=(-n "${SANITIZE_WORKERS:-6}")
    # Every run ends by SANITIZE_BUDGET seconds from here (default 560: a device call is 600),
    # so the summary below is always written; a run left no time is reported as not run.
    local deadline=$(($(date +%s) + ${SANITIZE_BUDGET:-560})) left
    (
        timeout "${MEMCHECK_TIMEOUT:-540}" compute-sanitizer --tool memcheck \
            --target-processes all --error-exitcode 86 --print-limit 20 \
            "$PY" -m pytest tests/gpu -q -p no:cacheprovider -p no:benchmark "${parallel[@]}" \
            -k "${MEMCHECK_K:-not beyond_2_31 and not 1m_columns}" >"$dir/memcheck-tests_gpu.txt" 2>&1
        echo $? >"$dir/memcheck-tests_gpu.rc"
    ) &
    runs+=(memcheck-tests_gpu)
    # Racecheck is the slowest by far (it tracks every shared-memory access): its runs are split
    # by dtype too (SANITIZE_SPLIT: the tools split so).
    local dtype dtypes name
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
        dtypes=all
        [[ " ${SANITIZE_SPLIT-racecheck} " == *" $tool "* ]] && dtypes="float32 float16 bfloat16"
        for group in $groups; do
            for dtype in $dtypes; do
                name=$tool-$group
                [[ $dtype == all ]] || name+=-$dtype
                while (($(jobs -rp | wc -l) > ${SANITIZE_JOBS:-10})); do wait -n; done
                runs+=("$name")
                left=$((deadline - $(date +%s)))
                if ((left < 20)); then  # its summary line will say it never ran
                    echo "not run: SANITIZE_BUDGET spent" >"$dir/$name.txt"
                    echo 124 >"$dir/$name.rc"
                    continue
                fi
                (
                    local only=(--only "$group")
                    [[ $dtype == all ]] || only+=(--dtypes "$dtype")
                    timeout "$((left < ${SANITIZE_TIMEOUT:-540} ? left : ${SANITIZE_TIMEOUT:-540}))" compute-sanitizer --tool "$tool" --error-exitcode 86 \
                        --print-limit 20 "$PY" scripts/sanitize_cases.py "${only[@]}" >"$dir/$name.txt" 2>&1
                    echo $? >"$dir/$name.rc"
                ) &
            done
        done
    done
    wait
    # One line a run: its exit (124: out of time) and the sanitizer's own summary line.
    local run rc summary
    for run in "${runs[@]}"; do
        rc=$(cat "$dir/$run.rc" 2>/dev/null || echo "?")
        summary=$(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$dir/$run.txt" | tail -1)
        [[ -n $summary ]] || summary="no summary line; its last: $(tail -1 "$dir/$run.txt")"
        printf '%-38s exit %-3s %s\n' "$run" "$rc" "$summary"
        [[ $rc == 0 ]] || note_failure "sanitize $run" "$rc"
    done | tee "$LOG_DIR/sanitize-summary.txt"
    grep -q '!!!' "$LOG_DIR/sanitize-summary.txt" && status=1
    unset PYTORCH_NO_CUDA_MEMORY_CACHING
}

run_bench() {
    # Extra arguments per script: GPU_OPTIM_ARGS, GPU_TRANSFORMER_ARGS, GPU_QUANTIZER_ARGS.
    step bench
    local script var rc extra
    for script in gpu_optim gpu_transformer gpu_quantizer; do
        var=${script^^}_ARGS
        read -ra extra <<<"${!var:-}"
        timeout "${BENCH_TIMEOUT:-150}" "$PY" "bench/$script.py" --out "$LOG_DIR/$script.json" "${extra[@]}" 2>&1 \
            | tee "$LOG_DIR/$script.txt"
        rc=${PIPESTATUS[0]}
        [[ $rc == 0 ]] || note_failure "bench $script" "$rc"
    done
}

# The candidates of issue 37, each a define its kernel reads (see the kernel's comment).
DEFAULT_CANDIDATES="quantizer:QUANTIZER_REDO_UNSURE_ONLY:gpu_quantizer"

run_candidates() {
    step "candidates: ${CANDIDATES:-$DEFAULT_CANDIDATES}"
    local item op define script dir rc
    # A command run as the candidate: its define, and its own folder (op_builder's build key does
    # not see NVCC_APPEND_FLAGS, so the current build's folder would answer for it).
    as_candidate() { env TORCH_EXTENSIONS_DIR="$dir" NVCC_APPEND_FLAGS="-D$define" "$@"; }
    for item in ${CANDIDATES:-$DEFAULT_CANDIDATES}; do
        IFS=: read -r op define script <<<"$item"
        dir=$TORCH_EXTENSIONS_DIR-candidate-$define
        mkdir -p "$dir"
        as_candidate MAX_JOBS="$(nproc)" "$PY" scripts/gpu_proof.py load "$op" >"$LOG_DIR/candidate-build-$define.log" 2>&1 \
            || { note_failure "candidate $define build" $?; tail -5 "$LOG_DIR/candidate-build-$define.log"; continue; }
        as_candidate timeout "${TEST_TIMEOUT:-300}" "$PY" -m pytest tests/gpu -q -p no:cacheprovider --timeout 120 \
            -k "$op" >"$LOG_DIR/candidate-tests-$define.txt" 2>&1
        rc=$?
        tail -1 "$LOG_DIR/candidate-tests-$define.txt"
        [[ $rc == 0 ]] || note_failure "candidate $define tests" $rc
        timeout "${BENCH_TIMEOUT:-150}" "$PY" "bench/$script.py" --out "$LOG_DIR/$script-current.json" \
            >"$LOG_DIR/$script-current.txt" 2>&1 || note_failure "bench $script (current)" $?
        as_candidate timeout "${BENCH_TIMEOUT:-150}" "$PY" "bench/$script.py" --out "$LOG_DIR/$script-$define.json" \
            >"$LOG_DIR/$script-$define.txt" 2>&1 || note_failure "bench $script ($define)" $?
        echo "--- $script, current"; cat "$LOG_DIR/$script-current.txt"
        echo "--- $script, $define"; cat "$LOG_DIR/$script-$define.txt"
    done
}

for s in "${steps[@]}"; do
    "run_$s"
done
step "done, status $status"
exit $status
