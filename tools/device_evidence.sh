#!/usr/bin/env bash
# The GPU evidence of docs/performance (issue "GPU evidence at HEAD"), run on the lent H200
# from the repository root after the wheels of ../shared/tools/device-wheels.sh are installed.
#   bash tools/device_evidence.sh check      # imports, the GPU, a cuda demo with floors
#   bash tools/device_evidence.sh hardware   # tests/hardware in full
#   setsid bash tools/device_evidence.sh data &   # the claims' acquisitions, in the background
#   bash tools/device_evidence.sh claims-io  # first load, unverified warm load, layout B
#   bash tools/device_evidence.sh first-load # the first load alone (LAYOUTS=c2048:2048:1000 data)
#   bash tools/device_evidence.sh warm       # each layout's cold and cached cells (WARM=names)
#   bash tools/device_evidence.sh claims-compute  # encoded BF, products, iDPC, SSB, validate
# A device copy whose .git is stale carries .devgit from tools/make_devgit.sh (records then
# name HEAD as their revision).
# Everything it keeps goes under $OUT (default ./out): logs and a tarball of the reports.
set -uo pipefail
mode=${1:?check, hardware or claims}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
work=${WORK:-/var/tmp/quantem-evidence}
mkdir -p "$work"
data="$work/data"
# the storage id names the card that ran (an H100 can stand in for the H200)
sid=${STORAGE_ID:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 \
  | awk '{print tolower($2)}')-vm-local-disk}
# The device copy may hold a stale .git of its own (seen: the session's first revision).
if [ -d .devgit ] && command -v git >/dev/null; then
  rm -rf .git && mv .devgit .git && git config core.bare false && git reset -q
  printf '/.whl*/\n/out/\n' >>.git/info/exclude
  # its trees come without file contents: the files that match them supply those
  git add -A
fi

check_imports() {
  python3 - <<'PY'
import importlib, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
names = {"pyyaml": "yaml", "psycopg[binary]": "psycopg"}
for spec in deps:
    if spec.startswith(("plotly", "tomli")):
        continue  # plotly draws pages only and is not carried to the device
    name = spec.split(">")[0].split("=")[0].split("[")[0].strip().lower()
    importlib.import_module(names.get(name, name.replace("-", "_")))
import cupy
print("imports ok; cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())
PY
}

wait_for() { while [ ! -e "$data/$1.done" ]; do sleep 2; done; }

case "$mode" in
check)
  check_imports || exit 1
  nvidia-smi -L
  python3 -m harness run io-scale --demo --backend cuda --floors --output-dir "$work/demo" \
    --history-dir "$work/history" 2>&1 | tee "$OUT/demo.log"
  cp "$work/demo/loading.json" "$OUT/demo-loading.json"
  ;;
hardware)
  check_imports || exit 1
  git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head
  python3 -m pytest -q -m "" -p no:cacheprovider --tb=short -rfEs tests/hardware 2>&1 \
    | tee "$OUT/hardware.log" | tail -n 40
  ;;
data)
  # Layouts of 512x512x192x192 uint16, each in its own folder with its manifest: frames a
  # shard 2,048 (dose 1,000), 10,000 and 1,000 (dose 40,000). NAME.done marks each.
  mkdir -p "$data"
  for spec in ${LAYOUTS:-c2048:2048:1000 a10000:10000:40000 b1000:1000:40000}; do
    IFS=: read -r name fps dose <<<"$spec"
    [ -e "$data/$name.done" ] && continue
    python3 -m harness data synth "$data/$name" --name "$name" --scan-shape 512 512 \
      --detector-shape 192 192 --dtype uint16 --frames-per-shard "$fps" --dose "$dose" \
      --overwrite ${PROCESSES:+--processes $PROCESSES} >/dev/null || exit 1
    python3 -m harness manifest make "$data/$name" --out "$data/$name.json" \
      && touch "$data/$name.done"
  done
  ;;
claims-io|first-load|warm)
  check_imports || exit 1
  io() { name=$1 label=$2; shift 2; wait_for "$name"
    timeout ${IO_TIMEOUT:-200} python3 -m harness run io-scale "$data/$name" --backend cuda \
      --floors --load-only --selection-manifest "$data/$name.json" \
      --storage-id "$sid" --output-dir "$work/io-$label" \
      --history-dir "$work/history" "$@" 2>&1 | tee "$OUT/io-$label.log"; }
  # first load as the user feels it; chunk verification's share of the warm load; layout B
  [ "$mode" = warm ] || io c2048 c2048-fresh --reps 3 --fresh-process 3
  if [ "$mode" = warm ]; then  # the cached cells of each layout (cold beside them)
    for name in ${WARM:-c2048 b1000 a10000}; do io "$name" "$name" --reps ${REPS:-3}; done
  elif [ "$mode" = claims-io ]; then
    io c2048 c2048-noverify --reps 3 --no-verify-source
    io b1000 b1000 --reps 3
  fi
  tar -C "$work" -czf "$OUT/io-reports.tgz" $(cd "$work" && ls io-*/loading.json 2>/dev/null)
  ;;
claims-compute)
  check_imports || exit 1
  run() { name=$1; shift; timeout ${C_TIMEOUT:-150} python3 -m harness run compute "$@" \
    --backend cuda --output-dir "$work/c-$name" --history-dir "$work/history" 2>&1 \
    | tee "$OUT/c-$name.log"; }
  wait_for c2048
  for v in 1 2; do  # the encoded BF (and every product) on the payload of each format
    run encoded-v$v products --source "$data/c2048/c2048_master.h5" --format qem \
      --qem-version $v --representation encoded --storage-id "$sid" --reps 5
  done
  wait_for a10000
  run products products --source "$data/a10000/a10000_master.h5" \
    --storage-id "$sid" --reps 5
  run dpc512 dpc --source "$data/a10000/a10000_master.h5" --storage-id "$sid" \
    --voltage-kv 300 --convergence-mrad 25 --scan-step 1 --rotation 0 --reps 5
  run ssb512 ssb --source "$data/a10000/a10000_master.h5" --storage-id "$sid" \
    --voltage-kv 300 --convergence-mrad 25 --scan-step 1 --rotation 0 --bin-factor 4 \
    --dtype float32 --reps 2
  run validate validate --source tests/data/validation/manifest.json --reps 1
  tar -C "$work" -czf "$OUT/compute-reports.tgz" $(cd "$work" && ls c-*/compute.json 2>/dev/null)
  ;;
*) echo "unknown mode $mode" >&2; exit 64 ;;
esac
