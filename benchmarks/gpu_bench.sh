#!/bin/bash
# After benchmarks/gpu.sh, on the same warm GPU machine (the kit's /tmp/g and /tmp/site): bench's
# speedups with every layer offloaded, the heavy target with the good draft and the light target
# at 49k and 262k ids, greedy (checked token by token against the target alone).
set -u
cd "$(dirname "$0")/.."
export TB=/tmp/g/testbed PROMPTS=/tmp/g/data/specbench-dev.jsonl PYTHONPATH=/tmp/site:$PWD
for pair in "target-heavy-f16.gguf draft-q4_1.gguf" "target-f16.gguf draft-q4_1.gguf" "v262k/target-f16.gguf v262k/draft-q4_1.gguf"; do
  set -- $pair
  echo "== $1 + $2"
  python3 -m localspec bench -m "$TB/$1" -d "$TB/$2" --prompts "$PROMPTS" --limit 1 -n 128 --modes baseline,fixed-4,fixed-8,auto \
    > "$OUT/bench_$(echo "$1" | tr / _).log" 2>&1
  echo "exit $?"; grep -A 8 "│ all" "$OUT/bench_$(echo "$1" | tr / _).log" | head -6
done
