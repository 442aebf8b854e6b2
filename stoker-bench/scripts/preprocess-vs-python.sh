#!/usr/bin/env bash
# Side by side, in one run, on the same data set and cores: `stoker bench preprocess` (exact and
# fast) against ../shared/bench/baseline.py (Pillow serial, thread pool, torch DataLoader; plain
# and with draft()). Rounds are interleaved so that machine noise hits every configuration alike;
# the summary gives medians and ratios. Needs ../shared (a developer's benchmark, not a test).
# The Python thread pool also runs at 1 and 4 threads and, as "-malloc", with freed memory kept in the process
# (Pillow's block cache and glibc's thresholds): on a VM where first-touching pages is slow that is Python's best
# configuration, and the exact ratio is taken against the best of them all. stoker-exact-scalar is Stoker with
# its resizers' Vector API path off (-Dstoker.vector=off), the code before it.
#
#   stoker-bench/scripts/preprocess-vs-python.sh            # N=400 samples per config, 3 rounds
#   N=1000 ROUNDS=5 MAXPIX=451584 stoker-bench/scripts/preprocess-vs-python.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SHARED="${SHARED:-$ROOT/../shared}"
DATA="${DATA:-$ROOT/.stoker/bench/ds2000}"
N="${N:-400}"
ROUNDS="${ROUNDS:-3}"
MAXPIX="${MAXPIX:-1003520}"
THREADS="${THREADS:-$(nproc)}"
OUT="${OUT:-$ROOT/.stoker/bench/preprocess-$(date +%Y%m%d-%H%M%S).jsonl}"
PY=/usr/bin/python3
mkdir -p "$(dirname "$OUT")"

[[ -f "$DATA/train.jsonl" ]] || "$PY" "$SHARED/bench/make_dataset.py" --out "$DATA" --n 2000 --seed 1234
"$ROOT/stoker" --version >/dev/null   # build before timing anything

py() {  # label, extra baseline args
  local label="$1"; shift
  env "${PYENV[@]}" "$PY" "$SHARED/bench/baseline.py" --data "$DATA" --n "$N" --max-pixels "$MAXPIX" --label "$label" "$@" | tail -1 \
    | "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({"config": r["label"], "samples_per_s": r["samples_per_s"], "mpix_per_s": r["src_mpix_per_s"]}))' >> "$OUT"
}
PYENV=()
MALLOC_KEPT=(PILLOW_BLOCKS_MAX=128 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456)
stoker() {  # label, decode-scale
  "$ROOT/stoker" bench preprocess --data "$DATA/train.jsonl" --limit "$N" --warmup 200 --threads "$THREADS" \
      --max-pixels "$MAXPIX" --decode-scale "$2" | tail -1 \
    | "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({"config": sys.argv[1], "samples_per_s": r["samples_per_s"], "mpix_per_s": r["mpix_per_s"]}))' "$1" >> "$OUT"
}

for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  stoker stoker-exact off
  STOKER_JAVA_OPTS="-Dstoker.vector=off" stoker stoker-exact-scalar off
  py python-serial --mode serial
  py python-threads-1 --mode threads --threads 1
  py python-threads --mode threads --threads "$THREADS"
  py python-threads-4 --mode threads --threads 4
  PYENV=("${MALLOC_KEPT[@]}")
  py python-threads-malloc --mode threads --threads "$THREADS"
  py python-threads-4-malloc --mode threads --threads 4
  PYENV=()
  py python-dataloader --mode dataloader --workers "$THREADS"
  stoker stoker-fast auto
  py python-serial-draft --mode serial --draft
  py python-threads-draft --mode threads --threads "$THREADS" --draft
  py python-dataloader-draft --mode dataloader --workers "$THREADS" --draft
done

"$PY" - "$OUT" "$N" "$MAXPIX" "$THREADS" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for r in rows:
    med.setdefault(r["config"], []).append(r["samples_per_s"])
med = {k: statistics.median(v) for k, v in med.items()}
print(f"samples per config {sys.argv[2]}, max_pixels {sys.argv[3]}, threads/workers {sys.argv[4]}; medians of {len(rows)//len(med)} rounds")
print(f"{'config':26s} {'samples/s':>10s}")
for k, v in med.items():
    print(f"{k:26s} {v:10.2f}")
best_exact = max(v for k, v in med.items() if k.startswith("python") and not k.endswith("draft"))
best_draft = max(v for k, v in med.items() if k.startswith("python") and k.endswith("draft"))
print(f"exact: stoker / best python = {med['stoker-exact'] / best_exact:.2f}x (target >= 2); scalar resizers {med['stoker-exact-scalar'] / best_exact:.2f}x")
print(f"fast:  stoker / best python draft = {med['stoker-fast'] / best_draft:.2f}x (target >= 4)")
print(json.dumps({"exact_ratio": round(med['stoker-exact'] / best_exact, 2), "fast_ratio": round(med['stoker-fast'] / best_draft, 2), "medians": med}))
PYEOF
