#!/usr/bin/env bash
# The issue-23 ablation on a real model with vLLM on a GPU: the dose step, then paired seeds per arm.
#
#   MODEL=/path/to/Qwen2.5-0.5B-Instruct PYTHON=.venv-vllm/bin/python bash benchmarks/gpu_ablation.sh
#   bash benchmarks/gpu_ablation.sh --dry-run        # (or DRY_RUN=1) on any CPU: check and print every command
#
# Protocol (docs/training.md#ablation, the same as `tirl ablate` on the CPU, with a real model):
#   1. dose:  tirl ablate --dose        `off` only, DOSE_SEEDS seeds at each level of LEVELS (mildest first);
#             a level is accepted when `off` collapses in >= 2 of 3 seeds and the spikes sit in void rows;
#   2. test:  tirl ablate --level L     at the first accepted level (or LEVEL), SEEDS paired seeds x MODES,
#             on the validation split (the split the default is chosen on);
#   3. OUT/report.md (the dose table, the ablation table with p-values and CIs, the commands, the machine)
#      and OUT/gpu_ablation.json ({"settings", "dose": dose.json, "test": ablation.json | null}).
#   No level accepted: that is the result; the report says so and the test is not run (LEVEL=... forces one).
#
# Every run: the model at MODEL trained in float32 on one GPU (model.device=cuda), episodes sampled by vLLM in
# process (model.generator=vllm; at the dose levels in bf16: generation.dtype=bfloat16), the tir-chain job of
# tirl.ablation.STRESS with the level's overrides, then these GPU settings (they come last, so they win):
# algo.lr=LR and algo.warmup_steps=WARMUP (STRESS's 3e-4 without warm-up is a hammer for a 0.5B model),
# longer turns for a real model's prose (MAX_NEW_TOKENS, MAX_TOTAL_TOKENS), GPU_MEM for vLLM's share.
#
# Environment: MODEL (required unless dry-run), PYTHON (python3; vLLM lives in .venv-vllm: make install-vllm),
# OUT (runs/gpu-ablation-<time>), SEEDS (10), DOSE_SEEDS (3), STEPS (20), MODES (off,mask,drop,penalize,roc),
# LEVELS (every dose level), LEVEL (skip the dose step and test at this level), LR (1e-6), WARMUP (5),
# MAX_NEW_TOKENS (512), MAX_TOTAL_TOKENS (4096), GPU_MEM (0.35), EXTRA (more KEY=VALUE overrides, space-separated;
# one of a key the script sets replaces it), VERBOSE (1: the dry run also prints each level's resolved config).
# Bad input: one `error:` line naming the variable and the fix, exit 2. Not run where tirl is developed (no GPU):
# only --dry-run is, by tests/smoke/test_gpu_ablation_dry_run.py. Time on a GPU: not measured.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
TIRL=("$PYTHON" -m tirl.cli)

die() { echo "error: $*" >&2; exit 2; }

DRY=${DRY_RUN:-0}
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY=1 ;;
        -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "gpu_ablation.sh: unknown argument '$arg': use --dry-run (or none); settings are environment variables (--help)" ;;
    esac
done
[[ "$DRY" == 0 || "$DRY" == 1 ]] || die "DRY_RUN=$DRY is invalid: use 1 (dry run) or 0"

SEEDS=${SEEDS:-10}
DOSE_SEEDS=${DOSE_SEEDS:-3}
STEPS=${STEPS:-20}
MODES=${MODES:-off,mask,drop,penalize,roc}
LR=${LR:-1e-6}
WARMUP=${WARMUP:-5}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-512}
MAX_TOTAL_TOKENS=${MAX_TOTAL_TOKENS:-4096}
GPU_MEM=${GPU_MEM:-0.35}
OUT=${OUT:-runs/gpu-ablation-$(date +%Y%m%d-%H%M%S)}
for name in SEEDS DOSE_SEEDS STEPS; do
    [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die "$name=${!name} is invalid: give a positive integer"
done
if (( SEEDS < 10 )); then
    echo "note: SEEDS=$SEEDS paired seeds per arm: the protocol asks for >= 10 (fewer cannot separate 0.2 from 0.8 collapse rates)" >&2
fi
if [[ -z "${LEVELS:-}" ]]; then
    LEVELS=$("$PYTHON" -c 'from tirl.ablation import DOSE_LEVELS; print(",".join(DOSE_LEVELS))') \
        || die "PYTHON=$PYTHON cannot import tirl: point PYTHON at the environment tirl is installed in"
fi

if [[ -z "${MODEL:-}" ]]; then
    (( DRY )) || die "MODEL is not set: point it at a local Hugging Face model directory, e.g. MODEL=/path/to/Qwen2.5-0.5B-Instruct"
    MODEL=/path/to/Qwen2.5-0.5B-Instruct
    echo "note: MODEL not set; the dry run checks the commands with the placeholder $MODEL"
elif [[ ! -f "$MODEL/config.json" ]]; then
    (( DRY )) || die "MODEL=$MODEL is not a model directory (no config.json): give a local Hugging Face model directory"
    echo "note: MODEL=$MODEL is not on this machine; the dry run checks the commands only"
fi

SETS=(
    model.path="$MODEL" model.generator=vllm model.device=cuda model.vllm_gpu_memory_utilization="$GPU_MEM"
    algo.lr="$LR" algo.warmup_steps="$WARMUP" generation.max_new_tokens="$MAX_NEW_TOKENS"
    generation.max_total_tokens="$MAX_TOTAL_TOKENS" rollout.run_workers=64 algo.micro_batch_tokens=8192
)
read -r -a extra <<< "${EXTRA:-}"
SETS+=("${extra[@]}")
# one item per key, EXTRA's over the defaults above (tirl refuses one key set twice to two values)
mapfile -t SETS < <("$PYTHON" -c 'import sys; from tirl.ablation import last_wins
print("\n".join(last_wins(sys.argv[1:]).values()))' "${SETS[@]}")
SET_ARGS=()
for s in "${SETS[@]}"; do SET_ARGS+=(--set "$s"); done

DOSE_CMD=("${TIRL[@]}" ablate --dose --json --seeds "$DOSE_SEEDS" --steps "$STEPS" --levels "$LEVELS"
          --out "$OUT/dose" "${SET_ARGS[@]}")
test_cmd() {  # the test's command at level $1
    printf '%s\0' "${TIRL[@]}" ablate --json --level "$1" --seeds "$SEEDS" --modes "$MODES" --steps "$STEPS" \
        --split validation --out "$OUT/test" "${SET_ARGS[@]}"
}
show() { printf '+'; printf ' %q' "$@"; printf '\n'; }

if (( DRY )); then
    IFS=, read -r -a level_list <<< "$LEVELS"
    echo "dry run: nothing is trained, nothing is written; every command below is checked by tirl itself"
    show "${DOSE_CMD[@]}"
    "${DOSE_CMD[@]/--json/--dry-run}"  # checks --levels, --out and every run's config; prints the tirl train commands
    for level in "${level_list[@]}"; do
        mapfile -d '' -t cmd < <(test_cmd "$level")
        show "${cmd[@]}"
        "${cmd[@]/--json/--dry-run}"
        # the resolved config of the level's first test run (off, seed 0), as tirl config show prints it; the
        # plan's overrides with SETS last, one per key, as tirl ablate passes them (a key set twice is refused)
        mapfile -t overrides < <("$PYTHON" -c 'import sys; from tirl.ablation import AblationPlan
plan = AblationPlan(level=sys.argv[1], steps=int(sys.argv[2]), split="validation", extra=tuple(sys.argv[3:]))
print("\n".join(plan.overrides("off", 0)))' "$level" "$STEPS" "${SETS[@]}")
        cfg_args=()
        for s in "${overrides[@]}"; do cfg_args+=(--set "$s"); done
        show "${TIRL[@]}" config show "${cfg_args[@]}"
        if ! shown=$("${TIRL[@]}" config show "${cfg_args[@]}" 2>&1); then echo "$shown" >&2; exit 2; fi
        [[ "${VERBOSE:-0}" == 1 ]] && echo "$shown"
        echo "config ok: level $level"
    done
    echo "dry run ok: dose $DOSE_SEEDS seeds x ${#level_list[@]} levels; test $SEEDS seeds x $MODES at the accepted level"
    exit 0
fi

command -v nvidia-smi >/dev/null || die "no GPU here (nvidia-smi not found): run this on a GPU machine, or use --dry-run"
"$PYTHON" -c 'import vllm' 2>/dev/null || die "PYTHON=$PYTHON has no vllm: make install-vllm, then PYTHON=.venv-vllm/bin/python"
[[ ! -e "$OUT" ]] || die "OUT=$OUT exists: give a new directory (an ablation never overwrites runs)"
mkdir -p "$OUT"
show "${DOSE_CMD[@]}" | tee "$OUT/commands.txt"
if [[ -z "${LEVEL:-}" ]]; then
    "${DOSE_CMD[@]}" | tee "$OUT/dose.log"
    LEVEL=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["accepted_level"] or "")' "$OUT/dose/dose.json")
fi
if [[ -n "$LEVEL" ]]; then
    mapfile -d '' -t cmd < <(test_cmd "$LEVEL")
    show "${cmd[@]}" | tee -a "$OUT/commands.txt"
    "${cmd[@]}" | tee "$OUT/test.log"
fi
"$PYTHON" - "$OUT" "$MODEL" "$LEVEL" <<'EOF'
import json, platform, subprocess, sys
from pathlib import Path

out, model, level = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def read(p: Path):
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
data = {"settings": {"model": model, "level": level or None, "gpu": gpu, "host": platform.node()},
        "dose": read(out / "dose" / "dose.json"), "test": read(out / "test" / "ablation.json")}
(out / "gpu_ablation.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
parts = [f"# GPU ablation: {model}\n\nGPU: {gpu}\n\nCommands:\n\n```\n{(out / 'commands.txt').read_text()}```\n"]
for title, md in (("Dose finding", out / "dose" / "dose.md"), ("The test", out / "test" / "ablation.md")):
    parts.append(f"## {title}\n\n" + (md.read_text(encoding="utf-8") if md.is_file() else "not run\n"))
if not level:
    parts.append("\nNo stress level was accepted: `off` did not collapse in 2 of 3 seeds with the spikes in void "
                 "rows at any level. That is the result; the test was not run.\n")
(out / "report.md").write_text("\n".join(parts), encoding="utf-8")
print(f"report: {out / 'report.md'}; json: {out / 'gpu_ablation.json'}")
EOF
