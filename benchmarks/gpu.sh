#!/bin/bash
# #19 on a CUDA GPU, run by ../shared/gpu's kit (call 2: `bash .gpu/call2.sh benchmarks/gpu.sh`,
# which sets TB, NATIVE, PROMPTS and OUT): what the engine spends outside llama.cpp per step with
# every layer offloaded, greedy argmaxes taken on the device and on the host, beside llama-bench and
# llama-cpp-python on the same GPU; bench's speedups on the heavy pair; then the same at 262k ids.
# The kit's wheels lack the server's, which the CLI imports: after stage.sh, and before call 1,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .gpu/wheels starlette anyio sniffio idna
set -u
cd "$(dirname "$0")/.."
MODES=alone-greedy,alone-temp0.8,draft8-greedy,draft8-temp0.8,draft-auto-greedy
overhead() {  # WIDTH SECONDS
  timeout "$2" python3 benchmarks/overhead.py "$TB" --native "$NATIVE" --prompts "$PROMPTS" --count 3 --repeat 1 -n 128 \
    --widths "$1" --gpu-layers 99 --argmax device,host --modes "$MODES" --json "$OUT/overhead_$1.json" > "$OUT/overhead_$1.log" 2>&1
  echo "overhead $1: exit $?"; sed -n '/^| width/,$p' "$OUT/overhead_$1.log"; tail -3 "$OUT/overhead_$1.log" | grep -i error
}
overhead 49k 150
timeout 100 python3 -m localspec bench -m "$TB/target-heavy-f16.gguf" -d "$TB/draft-q4_1.gguf" --prompts "$PROMPTS" --limit 1 -n 128 \
  --modes baseline,fixed-4,fixed-8,auto > "$OUT/bench_heavy.log" 2>&1
echo "bench heavy: exit $?"; grep -A 6 "│ all" "$OUT/bench_heavy.log"
timeout 90 python3 -X faulthandler benchmarks/wide_vocab.py "$TB" --widths 262144 --files target-f16.gguf,draft-q4_1.gguf > "$OUT/wide_vocab.log" 2>&1
echo "wide_vocab: exit $?"; grep " ids," "$OUT/wide_vocab.log"
[ -f "$TB/v262k/draft-q4_1.gguf" ] && overhead 262k 150
