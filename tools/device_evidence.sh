#!/usr/bin/env bash
# The GPU evidence of docs/performance (issue "GPU evidence at HEAD"), run on the lent H200
# from the repository root after the wheels of ../shared/tools/device-wheels.sh are installed.
#   bash tools/device_evidence.sh check      # imports, the GPU, a cuda demo with floors
#   bash tools/device_evidence.sh hardware   # tests/hardware in full
#   bash tools/device_evidence.sh data       # the claims' acquisitions, in the background
#   bash tools/device_evidence.sh claims-io  # HDF5/.qem loads (dense, encoded) with floors
#   bash tools/device_evidence.sh claims-compute  # products, iDPC, SSB, validate on cuda
# A checkout carried without .git may carry a shallow bare clone as .devgit (records then
# name their revision): `git clone -q --depth 1 --bare file://$PWD .devgit`.
# Everything it keeps goes under $OUT (default ./out): logs and a tarball of the reports.
set -uo pipefail
mode=${1:?check, hardware or claims}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
work=${WORK:-/var/tmp/quantem-evidence}
mkdir -p "$work"
data="$work/data"
# The device copy may hold a stale .git of its own (seen: the session's first revision).
if [ -d .devgit ] && command -v git >/dev/null; then
  rm -rf .git && mv .devgit .git && git config core.bare false && git reset -q
  printf '/.whl*/\n/out/\n' >>.git/info/exclude
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
  # Layouts of 512x512x192x192 uint16: frames a shard (27 x 10,000 and 263 x 1,000 of the
  # issue, and 128 x 2,048 at dose 1,000). Marked done when all three are written.
  mkdir -p "$data"
  for spec in "a10000:10000:40000" "b1000:1000:40000" "c2048:2048:1000"; do
    IFS=: read -r name fps dose <<<"$spec"
    [ -e "$data/$name/${name}_master.h5" ] || python3 -m harness data synth "$data/$name" \
      --name "$name" --scan-shape 512 512 --detector-shape 192 192 --dtype uint16 \
      --frames-per-shard "$fps" --dose "$dose" ${PROCESSES:+--processes $PROCESSES} >/dev/null \
      || exit 1
  done
  python3 -m harness manifest make "$data" --out "$data/manifest.json" && touch "$data/.done"
  ;;
claims-io)
  check_imports || exit 1
  while [ ! -e "$data/.done" ]; do sleep 2; done
  # dense .qem 1.0 with first loads; the resident encoded payload of 1.0 and of 2.0.
  for run in "dense:1:--fresh-process 3" "encoded:1:" "encoded:2:"; do
    IFS=: read -r rep version extra <<<"$run"
    timeout ${IO_TIMEOUT:-200} python3 -m harness run io-scale "$data" --backend cuda --floors \
      --load-only --reps 5 --representation $rep --qem-version $version $extra \
      --selection-manifest "$data/manifest.json" --storage-id h200-vm-local-disk \
      --output-dir "$work/io-$rep-$version" --history-dir "$work/history" \
      2>&1 | tee "$OUT/io-$rep-$version.log"
  done
  tar -C "$work" -czf "$OUT/io-reports.tgz" $(cd "$work" && ls io-*/loading.json 2>/dev/null)
  ;;
claims-compute)
  check_imports || exit 1
  while [ ! -e "$data/.done" ]; do sleep 2; done
  run() { name=$1; shift; timeout 200 python3 -m harness run compute "$@" --backend cuda \
    --output-dir "$work/c-$name" --history-dir "$work/history" 2>&1 | tee "$OUT/c-$name.log"; }
  run products products --source "$data/a10000/a10000_master.h5" --storage-id h200-vm-local-disk \
    --reps 5
  run dpc dpc --source tests/data/srtio3/srtio3_focus_high_master.h5 --storage-id repo-test-data \
    --energy-ev 200000 --mrad-per-pixel 2.14078876 --scan-step 0.488125 --reps 5
  run ssb ssb --source tests/data/ssb/sto_thin_high_master.h5 --storage-id repo-test-data \
    --energy-ev 200000 --convergence-mrad 25 --mrad-per-pixel 2.14078875948173 \
    --scan-step 0.2440625 --rotation 0 --reps 2
  run validate validate --source tests/data/validation/manifest.json --reps 1
  tar -C "$work" -czf "$OUT/compute-reports.tgz" $(cd "$work" && ls c-*/compute.json 2>/dev/null)
  ;;
*) echo "unknown mode $mode" >&2; exit 64 ;;
esac
