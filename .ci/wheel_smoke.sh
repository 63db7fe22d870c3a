#!/usr/bin/env bash
# localspec as people install it: the wheel built from this checkout, installed (not editable) into a
# fresh venv with every dependency at the floor pyproject.toml allows (.ci/floors.txt), then run from
# another directory: --help, run on a tiny model, index build and run --datastore, serve answering
# one request. $1: a folder holding the llama-cpp-python wheel (built once, for both environments).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
wheels=$1
work=$(mktemp -d)
serve_pid=
trap '[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" wheel --no-deps -q -w "$work/dist" "$repo"
"$work/venv/bin/pip" install -q --find-links "$wheels" -c "$repo/.ci/floors.txt" "$work"/dist/localspec-*.whl
cd "$work"
export XDG_CACHE_HOME=$work/cache XDG_CONFIG_HOME=$work/config XDG_DATA_HOME=$work/data XDG_STATE_HOME=$work/state
bin=$work/venv/bin
# The tiny model the suite writes (gguf, a dependency, is in the venv); nothing else of the checkout is used.
"$bin/python" - "$repo/tests" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from tiny_models import TinySpec, write_tiny_llama

write_tiny_llama(Path("tiny.gguf"), TinySpec(seed=1))
write_tiny_llama(Path("close.gguf"), TinySpec(seed=2, perturb_from=1, perturb=0.03))
Path("notes").mkdir()
Path("notes/a.txt").write_text("the cat sat on the mat and the dog ran to the big red house\n" * 20)
PY
"$bin/pip" freeze | grep -iE '^(typer|rich|huggingface.hub|numpy|starlette|uvicorn)=='
"$bin/localspec" --help > /dev/null
"$bin/localspec" models > /dev/null  # the shipped models.toml is in the wheel
"$bin/localspec" run -m tiny.gguf -d close.gguf -p "the cat" -n 8 --temp 0 -q
"$bin/localspec" index build notes notes -m tiny.gguf
"$bin/localspec" run -m tiny.gguf --datastore notes -p "the cat sat on the mat" -n 8 --temp 0 -q
"$bin/localspec" serve -m tiny.gguf --port 0 2> serve.log &
serve_pid=$!
for _ in $(seq 120); do grep -q "serving" serve.log && break; sleep 0.5; done
url=$(grep -o 'http://[^ ]*/v1' serve.log)
"$bin/python" - "$url" <<'PY'
import json
import sys
import urllib.request

body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "the cat"}], "max_tokens": 8, "temperature": 0}).encode()
request = urllib.request.Request(sys.argv[1] + "/chat/completions", body, {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=120))
assert answer["usage"]["completion_tokens"] == 8, answer
PY
kill -INT "$serve_pid" && wait "$serve_pid"
serve_pid=
echo "wheel smoke test: passed"
