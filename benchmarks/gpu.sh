#!/bin/bash
# #19 on a CUDA GPU, run by ../shared/gpu's kit (call 2: `bash .gpu/call2.sh benchmarks/gpu.sh`,
# which sets TB, NATIVE, PROMPTS and OUT): what the engine spends outside llama.cpp per step with
# every layer offloaded, greedy argmaxes taken on the device and on the host, beside llama-bench and
# llama-cpp-python on the same GPU.
set -u
cd "$(dirname "$0")/.."
python3 -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode()[:400])'
smoke() {  # load the light target as localspec does, every layer offloaded
  timeout 60 python3 -X faulthandler -c "import sys; sys.path.insert(0, '.'); $1
from pathlib import Path; from localspec.backend.model import Model, ModelOptions
m = Model(Path('$TB/target-f16.gguf'), ModelOptions(n_ctx=512, n_gpu_layers=99)); print('loaded; argmax on the device:', m.argmax is not None)" 2>&1 | tail -4
}
PATCH=""
out=$(smoke ""); echo "$out"
if ! echo "$out" | grep -q loaded; then
  PATCH="import localspec.backend.weights as w; w._cpu_has_amx = lambda: False"
  echo "retry with extra buffer types:"; smoke "$PATCH"
fi
timeout 170 python3 -c "import sys; sys.path.insert(0, '.'); $PATCH
import runpy; sys.argv = ['overhead.py', '$TB', '--native', '$NATIVE', '--prompts', '$PROMPTS', '--count', '2', '--repeat', '1', '-n', '128',
  '--widths', '49k', '--gpu-layers', '99', '--argmax', 'device,host', '--modes', 'alone-greedy,alone-temp0.8,draft8-greedy,draft8-temp0.8,draft-auto-greedy']
runpy.run_path('benchmarks/overhead.py', run_name='__main__')" > "$OUT/overhead_49k.log" 2>&1
echo "overhead: exit $?"; sed -n '/^| width/,$p' "$OUT/overhead_49k.log"; grep "tok/s, outside" "$OUT/overhead_49k.log" | head -30
