#!/usr/bin/env bash
# The GPU checks of issue 4, in the few long commands a lent GPU machine allows (each
# call of the device tool runs at most 10 minutes; a session has 30 minutes of device
# time). Run from the repository root on the GPU machine, with its own python3 (torch,
# triton, pytest, pytest-xdist are there; nothing to install):
#
#   bash tools/gpu_session.sh tests       # GPU test tier: full-size zoo fp32/bf16/graphs, ...
#   bash tools/gpu_session.sh bench       # eager / Inductor (+graphs) / fusionstitch (+graphs), fp32
#   bash tools/gpu_session.sh bench-bf16  # the same in bf16
#   bash tools/gpu_session.sh reductions  # persistent against looped reductions, rows 256-8192
#   bash tools/gpu_session.sh models      # the transformers models on cuda: judged against
#                                         # eager (bench/judge.py) and timed, small size
#   bash tools/gpu_session.sh groups      # per-group A/B against Inductor on cuda, the corpus
#
# Logs, JSON and pictures go to $OUT (the device tool brings that folder back), else to
# ./gpu-out. Each step stops itself before the tool's 10-minute limit (STEP_LIMIT); the
# bench writes its JSON after every workload, so a step cut short keeps what it did, and
# WORKLOADS=a,b runs the bench steps on those workloads only (the rest in a second call;
# each call's $OUT comes back on its own, so give the second call's JSON another name).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py="${PYTHON:-python3}"
limit="${STEP_LIMIT:-560}"
only=()
if [ -n "${WORKLOADS:-}" ]; then only=(--workloads "$WORKLOADS"); fi
step="${1:-}"
log="$out/${step:-usage}.log"

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $py -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch",
torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)'; } >"$log" 2>&1

case "$step" in
  tests)
    # the gpu tier, 14 workers (Triton compiles in parallel on the machine's 16 cores; at 4
    # workers the tier outran a 270 s limit on 2026-11-26, at 8 a 240 s one on 2026-11-27,
    # at 14 it reached 97 % in 250 s); -v names each result as it comes, so a run cut by
    # the limit still says which test failed
    timeout "$limit" $py -m pytest -v -m gpu -p no:cacheprovider -n 14 --tb=short --durations 15 \
      tests 2>&1 | tee -a "$log" ;;
  bench)
    timeout "$limit" $py -m bench.run --target cuda --size full --repeat 20 --min-time 0.5 \
      --against eager,inductor --cuda-graphs on --no-warm-start ${only[@]+"${only[@]}"} --out "$out" \
      2>&1 | tee -a "$log" ;;
  bench-bf16)
    timeout "$limit" $py -m bench.run --target cuda --size full --repeat 20 --min-time 0.5 \
      --against eager,inductor --cuda-graphs on --no-warm-start --dtype bfloat16 \
      ${only[@]+"${only[@]}"} --out "$out" 2>&1 | tee -a "$log" ;;
  models)
    # correctness first: every model's step judged against eager (a crash or a wrong
    # number shows in the table); Inductor left out to fit the limit (compile times)
    timeout "$limit" $py -m bench.run --suite models --target cuda --size small --repeat 5 \
      --min-time 0.05 --against eager --cuda-graphs off --no-warm-start \
      ${only[@]+"${only[@]}"} --out "$out" 2>&1 | tee -a "$log" ;;
  groups)
    # every fusion group of the generated corpus: our Triton kernel, torch unfused and
    # Inductor on the same subgraph, synchronised; the report lists where we lose
    timeout "$limit" $py -m bench.groups --target cuda --source corpus \
      --corpus-sizes "${CORPUS_SIZES:-16k,1M,16M}" --out "$out" 2>&1 | tee -a "$log" ;;
  reductions)
    timeout "$limit" $py -m bench.reductions --target cuda --out "$out" 2>&1 | tee -a "$log" ;;
  *)
    echo "usage: $0 tests|bench|bench-bf16|reductions|models|groups" >&2; exit 2 ;;
esac
