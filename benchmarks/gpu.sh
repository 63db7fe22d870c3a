#!/bin/bash
# #19 and #22 on a CUDA GPU, run by ../shared/gpu's kit (call 2: `bash .gpu/call2.sh benchmarks/gpu.sh`,
# which sets TB, NATIVE, PROMPTS and OUT), every step under a timeout so that the whole fits one call:
# a CLI smoke run; the 262k-id testbed; what the engine spends outside llama.cpp per step with every
# layer offloaded, greedy argmaxes taken on the device and on the host, at 262k ids; structured
# output on the heavy pair; then, as time allows, the same at 49k beside llama-bench and
# llama-cpp-python on the same GPU.
# The kit's wheels lack the server's, which the CLI imports: after stage.sh, and before call 1,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .gpu/wheels starlette anyio sniffio idna
set -u
cd "$(dirname "$0")/.."
BUDGET=${BUDGET:-320}  # seconds this script may take; each step gets what is left, up to its own cap
left() { local l=$((BUDGET - SECONDS)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
MODES=alone-greedy,draft8-greedy,draft-auto-greedy
overhead() {  # WIDTH SECONDS [--engine-only]
  timeout "$(left "$2")" python3 -m benchmarks.costs.overhead "$TB" --native "$NATIVE" --prompts "$PROMPTS" --count 2 --repeat 1 -n 96 ${3:-} \
    --widths "$1" --gpu-layers 99 --argmax device,host --modes "$MODES" --json "$OUT/overhead_$1.json" > "$OUT/overhead_$1.log" 2>&1
  echo "overhead $1: exit $?"; sed -n '/^| width/,$p' "$OUT/overhead_$1.log"; tail -3 "$OUT/overhead_$1.log" | grep -i error
}
timeout "$(left 40)" python3 -X faulthandler -m localspec run -m "$TB/target-heavy-f16.gguf" -d "$TB/draft-q4_1.gguf" -p "Why is the sky blue?" \
  -n 48 --temp 0 --json > "$OUT/smoke.json" 2> "$OUT/smoke.err"
echo "smoke: exit $?"; python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['stats']; print({k: s[k] for k in ('n_generated','n_drafted','n_accepted','tokens_per_second')})" "$OUT/smoke.json"; tail -3 "$OUT/smoke.err"
timeout "$(left 90)" python3 -X faulthandler -m benchmarks.testbeds.wide_vocab "$TB" --widths 262144 --files target-f16.gguf,draft-q4_1.gguf > "$OUT/wide_vocab.log" 2>&1
echo "wide_vocab: exit $?"; grep " ids," "$OUT/wide_vocab.log"
[ -f "$TB/v262k/draft-q4_1.gguf" ] && overhead 262k 80 --engine-only
timeout "$(left 70)" python3 -m benchmarks.drafters.structured "$TB/target-heavy-f16.gguf" --draft "$TB/draft-q4_1.gguf" -n 64 > "$OUT/structured.log" 2>&1
echo "structured: exit $?"; sed -n '/^| condition/,$p' "$OUT/structured.log"
[ $((BUDGET - SECONDS)) -gt 40 ] && overhead 49k 80
