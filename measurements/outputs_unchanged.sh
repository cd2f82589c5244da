#!/usr/bin/env bash
# Behaviour unchanged across a redesign: compare's, advise's and export's outputs on the built-in model at two
# revisions, each from its own worktree (the same venv, the tree on PYTHONPATH), diffed with paths, timings and the
# machine's free memory taken out. Usage: measurements/outputs_unchanged.sh OLD_REV [NEW_REV, default HEAD]
# (about 4 minutes a revision on 2 cores). Prints the differing lines; nothing past the headers means unchanged.
set -euo pipefail
OLD=$1; NEW=${2:-HEAD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/old" 2>/dev/null; git -C "$ROOT" worktree remove --force "$WORK/new" 2>/dev/null; rm -rf "$WORK"' EXIT

run() {  # $1: a worktree, $2: the output folder
  local R="env PYTHONPATH=$1 $PY -m ropecli"
  mkdir -p "$2"; cd "$2"
  $R compare --len 512 --len 1024 --method none,yarn,mixed --map none --map selfextend:G=4,W=64 --metric ppl,passkey \
    --samples 4 --cache-dir "$2/cache" --json > compare.json 2> /dev/null
  $R compare --len 512 --len 1024 --method none,yarn,mixed --map none --map selfextend:G=4,W=64 --metric ppl,passkey \
    --samples 4 --cache-dir "$2/cache" > compare.txt 2> /dev/null
  $R advise --len 1024 --budget 6 --samples 4 --cache-dir "$2/cache" --out "$2/adv" --json > advise.json 2> /dev/null
  for rt in transformers vllm sglang llamacpp ollama; do
    $R export --model builtin --method yarn --len 1024 --to $rt --out "$2/exp_$rt.json" > "export_$rt.txt" 2>&1 || true
  done
  $R export --model builtin --method none --map selfextend:G=4,W=64 --len 1024 --to transformers --out "$2/folder" > export_map.txt 2>&1 || true
}

for side in old new; do
  rev=$([ $side = old ] && echo "$OLD" || echo "$NEW")
  git -C "$ROOT" worktree add --detach -f "$WORK/$side" "$rev" > /dev/null 2>&1
  run "$WORK/$side" "$WORK/out_$side"
done

"$PY" - "$WORK" <<'EOF'
import difflib, json, re, sys
from pathlib import Path
work = Path(sys.argv[1])
SKIP = {"seconds", "cached", "elapsed", "wall_s", "cache_dir"}
def norm(x):
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items() if k not in SKIP}
    if isinstance(x, list):
        return [norm(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"\d+(\.\d+)? GB available", "N GB available", re.sub(re.escape(str(work)) + r"/(out_)?(old|new)", "P", x))
    return x
for name in sorted(p.name for p in (work / "out_old").iterdir() if p.suffix in (".json", ".txt")):
    a, b = (work / side / name for side in ("out_old", "out_new"))
    if name.endswith(".json"):
        a, b = (json.dumps(norm(json.loads(p.read_text())), indent=1).splitlines() for p in (a, b))
    else:
        a, b = (norm(p.read_text()).splitlines() for p in (a, b))
    lines = list(difflib.unified_diff(a, b, lineterm="", n=0))
    print(f"== {name}: {'unchanged' if not lines else f'{len(lines) - 2} line(s) differ'}")
    for line in lines[2:]:
        print("   ", line[:300])
EOF
