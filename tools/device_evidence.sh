#!/usr/bin/env bash
# The GPU evidence of docs/performance (issue "GPU evidence at HEAD"), run on the lent H200
# from the repository root after the wheels of ../shared/tools/device-wheels.sh are installed.
#   bash tools/device_evidence.sh check      # imports, the GPU, a cuda demo with floors
#   bash tools/device_evidence.sh hardware   # tests/hardware in full
#   bash tools/device_evidence.sh claims     # the GPU claims as records, with floors
# Everything it keeps goes under $OUT (default ./out): logs and a tarball of the reports.
set -uo pipefail
mode=${1:?check, hardware or claims}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
work=${WORK:-/var/tmp/quantem-evidence}
mkdir -p "$work"

check_imports() {
  python3 - <<'PY'
import importlib, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
names = {"pyyaml": "yaml", "psycopg[binary]": "psycopg"}
for spec in deps:
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
  python3 -m pytest -q -m "" -p no:cacheprovider --tb=short -rfEs tests/hardware 2>&1 \
    | tee "$OUT/hardware.log" | tail -n 40
  ;;
claims)
  check_imports || exit 1
  data="$work/data"
  mkdir -p "$data"
  # Layouts of 512x512x192x192 uint16: frames a shard (27 x 10,000 and 263 x 1,000 of the
  # issue, and 128 x 2,048 at dose 1,000).
  for spec in "a10000:10000:40000" "b1000:1000:40000" "c2048:2048:1000"; do
    IFS=: read -r name fps dose <<<"$spec"
    [ -e "$data/$name/${name}_master.h5" ] || python3 -m harness data synth "$data/$name" \
      --name "$name" --scan-shape 512 512 --detector-shape 192 192 --dtype uint16 \
      --frames-per-shard "$fps" --dose "$dose" >/dev/null
  done
  python3 -m harness manifest make "$data" --out "$data/manifest.json" || exit 1
  python3 -m harness run io-scale "$data" --backend cuda --floors --load-only --reps 5 \
    --selection-manifest "$data/manifest.json" --storage-id h200-vm-local-disk \
    --output-dir "$work/io-scale" --history-dir "$work/history" 2>&1 | tee "$OUT/io-scale.log"
  tar -C "$work" -czf "$OUT/reports.tgz" $(cd "$work" && find . -name '*.json' -path '*io-scale*')
  ;;
*) echo "unknown mode $mode" >&2; exit 64 ;;
esac
