#!/usr/bin/env bash
# io-scale before/after, back to back on the same data: `harness run io-scale` with an
# older tree (BEFORE, e.g. `git archive REV | tar -x -C DIR`) and with this checkout, in the
# order before, after, after, before; then every report imported into one history and
# compared with this checkout's `harness compare --format json` (the cells printed).
#
#   bash benchmarks/io_scale_before_after.sh BEFORE_TREE DATA OUT BACKEND SCAN REPS
#   e.g. bash benchmarks/io_scale_before_after.sh /var/tmp/before48 /var/tmp/p10data \
#            /var/tmp/p10 cuda 512 5
# DATA is written by benchmarks/io_scale_campaign.py (uint16, SCAN x SCAN) if not there.
# Extra PYTHONPATH entries (a site folder of wheels) go in SITE.
set -o pipefail
BEFORE=$(cd "$1" && pwd); DATA=$2; OUT=$3; BACKEND=$4; SCAN=$5; REPS=$6
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH=$HERE${SITE:+:$SITE}
python3 "$HERE/benchmarks/io_scale_campaign.py" "$DATA" --scan "$SCAN" "$SCAN" --dtypes uint16 \
  --processes "${PROCS:-$(nproc)}" | tail -2
mkdir -p "$OUT"
run() { # tree name
  local t0=$SECONDS
  (cd "$1" && PYTHONPATH=$1${SITE:+:$SITE} python3 -m harness run io-scale "$DATA" \
     --backend "$BACKEND" --selection-manifest "$DATA/manifest.json" --storage-id dev-disk \
     --output-dir "$OUT/$2" --reps "$REPS" --load-only > "$OUT/$2.log" 2>&1)
  echo "$2 rc=$? $((SECONDS - t0))s"
}
run "$BEFORE" b1; run "$HERE" a1; run "$HERE" a2; run "$BEFORE" b2
python3 -m harness history import --history-dir "$OUT/hist" "$OUT"/b1 "$OUT"/a1 "$OUT"/a2 "$OUT"/b2 | tail -1
python3 - "$OUT" <<'PY'
import hashlib, json, pathlib, subprocess, sys
out = pathlib.Path(sys.argv[1])
sha = {n: hashlib.sha256((out / n / "loading.json").read_bytes()).hexdigest() for n in ("b1", "a1", "a2", "b2")}
for cand, base in (("a1", "b1"), ("a2", "b2"), ("b2", "b1"), ("a2", "a1"), ("a1", "b2"), ("a2", "b1")):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "compare", "--history-dir", str(out / "hist"),
         "--baseline", sha[base][:16], sha[cand][:16], "--format", "json"],
        capture_output=True, text=True,
    )
    print(f"== {cand} vs {base}: exit {done.returncode}")
    for c in json.loads(done.stdout)["cells"]:
        print(f"   {c['format']:5s} {c['cache_state']:7s} {c['baseline_median']:.4f} -> "
              f"{c['candidate_median']:.4f} {c['change_percent']:+6.1f}% {c['verdict']}")
PY
