#!/usr/bin/env bash
# The GPU check of issue 34, in one run of at most 8 minutes, set-up included:
#   cuda_tests  tests/test_probe_cuda.py (+ tests/test_probe_devices.py) on the GPU
#   nosync      a small GPT trains 200 steps per precision with the probe under
#               torch.cuda.set_sync_debug_mode: zero syncs from the probe (the training's
#               own reported apart), grad norm = clip_grad_norm_'s, planted syncs all seen
#   cost        ms/step with no logging, dltop, TensorBoard, .item() per step;
#               fp32, bf16 autocast, fp16 + GradScaler; alternated blocks in one run
#   nvml        the GPU panel's readings against nvidia-smi and torch.cuda.memory_reserved()
#   oom         the oom demo on the GPU: the allocator's state in the log, the crash
#               banner's diagnosis, the OOM checklist's marks
#   adapters    Lightning precision="16-mixed" and HF fp16=True with DltopCallback: pre-clip
#               grad norm against a reference taken in the run
# Each part is `python -m scripts.gpu_check.<module> --device cuda|cpu --out DIR` (see
# docs/gpu.md), runs under its own `timeout` and within what is left of the budget; a part
# that fails or hangs is recorded as failed and the next one runs. One line per part here.
#
# Usage, from the repository root (the device tool: `bash scripts/gpu_check.sh`, ~540 s):
#   bash scripts/gpu_check.sh
# Env:
#   OUT                 results folder (default ./gpu-check-out): gpu_check.json,
#                       gpu_check.md, gpu_check.log (every part's output), oom.jsonl
#   GPU_CHECK_DEVICE    auto (default: cuda when torch sees one), cuda or cpu (the fallbacks)
#   GPU_CHECK_PARTS     which parts, in order (default: all six above)
#   GPU_CHECK_PY        the python to use as it is: nothing is installed (the tests' way)
#   GPU_CHECK_BUDGET_S  seconds for the whole run (default 470: 8 minutes less margin)
#   GPU_CHECK_LIMIT_<part>  that part's time limit in seconds (defaults in LIMIT below)
# Set-up (without GPU_CHECK_PY): a python whose torch sees CUDA is used as found (.venv-gpu,
# .venv, python3, python), never replaced by the CPU pin of the dev extra: the project is
# not pip-installed at all (PYTHONPATH=repo: dltop/ holds symlinks to the sources), and
# only the missing non-torch packages are installed, with torch held at its version by a
# constraint. A python outside a venv gets a .venv-gpu with --system-site-packages first.
# Without any CUDA torch on a machine with a GPU, torch==2.13.0 from PyPI (a CUDA build)
# goes into .venv-gpu. Exit: 0 when no part failed, 1 otherwise.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/gpu-check-out}
BUDGET=${GPU_CHECK_BUDGET_S:-470}
RESERVE=20  # seconds kept for the report
PARTS=${GPU_CHECK_PARTS:-cuda_tests nosync cost nvml oom adapters}
WANT_DEVICE=${GPU_CHECK_DEVICE:-auto}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG="$OUT/gpu_check.log"
: >"$LOG"
: >"$WORK/setup.txt"
: >"$WORK/status.tsv"

SETUP_DEADLINE=240  # no new pip install after this many seconds
PIP_OPTS=(-q --disable-pip-version-check --retries 1 --timeout 20)  # no network: fail fast

declare -A MODULE=([cuda_tests]=cuda_tests [nosync]=nosync [cost]=cost [nvml]=nvml_check
    [oom]=oom_check [adapters]=adapters_fp16)
declare -A LIMIT=([cuda_tests]=150 [nosync]=150 [cost]=150 [nvml]=90 [oom]=120 [adapters]=180)

say() { printf '%s\n' "$*" | tee -a "$LOG"; }
note() {  # one line of what the set-up did, for the report; FAIL: lines fail the check
    printf '%s\n' "$*" >>"$WORK/setup.txt"
    say "gpu_check setup: $*"
}

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # dltop.* through dltop/, scripts.*
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

# ---- a python with torch (a CUDA one when there is a GPU) ------------------------------------
cuda_torch() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' </dev/null >/dev/null 2>&1; }
any_torch() { "$1" -c 'import torch' </dev/null >/dev/null 2>&1; }
in_venv() { "$1" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)' </dev/null >/dev/null 2>&1; }
gpu_present() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
torch_version() { "$1" -c 'import torch; print(torch.__version__)' </dev/null 2>/dev/null; }

candidates() {
    local c
    for c in "$REPO/.venv-gpu/bin/python" "$REPO/.venv/bin/python" python3 python; do
        if [[ -x "$c" ]] || command -v "$c" >/dev/null 2>&1; then
            printf '%s\n' "$c"
        fi
    done
}

make_venv() {  # make_venv BASE [--system-site-packages]: .venv-gpu, echo its python
    local base=$1
    shift
    if [[ ! -x "$REPO/.venv-gpu/bin/python" ]]; then
        timeout 120 "$base" -m venv "$@" "$REPO/.venv-gpu" >>"$LOG" 2>&1 || return 1
    fi
    printf '%s\n' "$REPO/.venv-gpu/bin/python"
}

install_missing() {  # the non-torch packages the parts import, torch held where it is
    local py=$1 missing constraints="$WORK/constraints.txt" spec
    local -a opts=("${PIP_OPTS[@]}")
    if ! in_venv "$py"; then  # no venv could be made: the user site (PEP 668 allowing)
        opts+=(--user)
        if "$py" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
            opts+=(--break-system-packages)
        fi
    fi
    missing=$("$py" - <<'EOF'
import importlib.util
need = {
    "psutil": "psutil", "pynvml": "nvidia-ml-py", "msgspec": "msgspec",
    "textual": "textual>=8.2,<9", "rich": "rich>=13", "pytest": "pytest>=8,<9",
    "pytest_timeout": "pytest-timeout>=2.3", "numpy": "numpy", "lightning": "lightning>=2.4",
    "transformers": "transformers>=4.46", "accelerate": "accelerate>=1.1",
    "tensorboard": "tensorboard>=2.15",
}
print(" ".join(spec for mod, spec in need.items() if importlib.util.find_spec(mod) is None))
EOF
    )
    if [[ -z "$missing" ]]; then
        note "every package the parts import is there"
        return 0
    fi
    printf 'torch==%s\n' "$(torch_version "$py")" >"$constraints"
    note "installing: $missing (torch held at $(torch_version "$py"))"
    # shellcheck disable=SC2086
    if timeout 200 "$py" -m pip install "${opts[@]}" -c "$constraints" $missing >>"$LOG" 2>&1; then
        return 0
    fi
    for spec in $missing; do  # one by one: a package that cannot come costs only its parts
        if ((SECONDS > SETUP_DEADLINE)); then
            note "stopped installing at ${SECONDS} s: $spec and what follows are missing"
            break
        fi
        timeout 60 "$py" -m pip install "${opts[@]}" -c "$constraints" "$spec" >>"$LOG" 2>&1 ||
            note "could not install $spec: the parts that need it say so"
    done
}

setup_python() {
    local c found="" torch_py=""
    if [[ -n "${GPU_CHECK_PY:-}" ]]; then
        PY=$GPU_CHECK_PY
        note "python $PY as given (GPU_CHECK_PY): nothing installed"
        return
    fi
    while read -r c; do
        if cuda_torch "$c"; then
            found=$c
            break
        fi
        if [[ -z "$torch_py" ]] && any_torch "$c"; then torch_py=$c; fi
    done < <(candidates)
    if [[ -n "$found" ]]; then
        note "CUDA torch $(torch_version "$found") in $found: kept as it is"
        if in_venv "$found"; then
            PY=$found
        elif PY=$(make_venv "$found" --system-site-packages); then
            note "made .venv-gpu over it (--system-site-packages)"
        else
            PY=$found
            note "no venv could be made: installing into $found's user site"
        fi
        install_missing "$PY"
        return
    fi
    if gpu_present; then
        note "a GPU is here but no python has a CUDA torch: torch==2.13.0 from PyPI into .venv-gpu"
        if PY=$(make_venv python3) &&
            timeout 300 "$PY" -m pip install "${PIP_OPTS[@]}" "torch==2.13.0" >>"$LOG" 2>&1; then
            if cuda_torch "$PY"; then
                note "CUDA torch $(torch_version "$PY") installed"
                install_missing "$PY"
                return
            fi
            note "FAIL: torch $(torch_version "$PY") installed but sees no GPU (driver older than its CUDA?); the parts run on the CPU"
        else
            note "FAIL: no CUDA torch could be installed (no network?); the parts run on the CPU"
        fi
    fi
    if [[ -n "$torch_py" ]]; then
        PY=$torch_py
        note "no GPU torch: $PY (torch $(torch_version "$PY")) for the CPU fallbacks"
        return
    fi
    note "FAIL: no python with torch at all (make .venv/.installed-dev, or set GPU_CHECK_PY)"
    PY=python3
}

setup_python
case "$WANT_DEVICE" in
    cuda | cpu) DEVICE=$WANT_DEVICE ;;
    *) if cuda_torch "$PY"; then DEVICE=cuda; else DEVICE=cpu; fi ;;
esac
if [[ "$DEVICE" == cpu ]] && gpu_present && [[ "$WANT_DEVICE" != cpu ]]; then
    note "FAIL: nvidia-smi sees a GPU but torch in $PY does not: CPU fallbacks only"
fi
say "gpu_check: device $DEVICE, python $PY (torch $(torch_version "$PY" || echo none)), budget ${BUDGET} s, setup took ${SECONDS} s; parts: $PARTS"

# ---- the parts -----------------------------------------------------------------------------
run_part() {
    local part=$1 mod limit left start rc=0 line
    mod=${MODULE[$part]:-}
    if [[ -z "$mod" ]]; then
        say "gpu_check $part: FAIL — no such part (known: ${!MODULE[*]})"
        printf '%s\t%s\t%s\t%s\t\n' "$part" 2 0 0 >>"$WORK/status.tsv"
        return 0
    fi
    limit=${LIMIT[$part]}
    local override="GPU_CHECK_LIMIT_$part"
    limit=${!override:-$limit}
    left=$((BUDGET - SECONDS - RESERVE))
    if ((left < 20)); then
        printf '%s\t%s\t%s\t%s\t%s\n' "$part" 0 0 0 "not run: the ${BUDGET} s budget was spent" >>"$WORK/status.tsv"
        say "gpu_check $part: FAIL — not run: the ${BUDGET} s budget was spent"
        return 0
    fi
    if ((limit > left)); then limit=$left; fi
    start=$SECONDS
    timeout --kill-after=10 "$limit" "$PY" -m "scripts.gpu_check.$mod" \
        --device "$DEVICE" --out "$WORK" >"$WORK/$part.out" 2>&1 || rc=$?
    printf '%s\t%s\t%s\t%s\t\n' "$part" "$rc" "$((SECONDS - start))" "$limit" >>"$WORK/status.tsv"
    {
        printf '\n==== %s: exit %s after %s s (limit %s s)\n' "$part" "$rc" "$((SECONDS - start))" "$limit"
        tail -c 60000 "$WORK/$part.out"
    } >>"$LOG"
    line=$(grep -a "^gpu_check $part: " "$WORK/$part.out" | tail -n 1 || true)
    if [[ -z "$line" ]]; then
        line="gpu_check $part: FAIL — no result (exit $rc"
        if ((rc == 124 || rc == 137)); then line+=", killed at its $limit s limit"; fi
        line+="): $(tail -n 1 "$WORK/$part.out" | cut -c1-200)"
    fi
    printf '%s\n' "$line"
    return 0
}

for part in $PARTS; do
    run_part "$part"
done

if [[ -f "$WORK/oom.jsonl" ]]; then
    cp "$WORK/oom.jsonl" "$OUT/oom.jsonl"
fi
rc=0
"$PY" -m scripts.gpu_check.report --work "$WORK" --out "$OUT" --device "$DEVICE" 2>>"$LOG" | tee -a "$LOG" || rc=$?
if [[ ! -s "$OUT/gpu_check.json" ]]; then
    say "gpu_check: FAIL — the report could not be written (see $LOG)"
    exit 1
fi
say "gpu_check: $((SECONDS)) s in all; results in $OUT"
exit "$rc"
