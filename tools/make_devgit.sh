#!/usr/bin/env bash
# A git directory of HEAD's commit and trees alone (no file contents, ~200 KB) as .devgit, for
# a device copy whose own .git is stale: tools/device_evidence.sh puts it in place, and the
# records then name HEAD as their revision (clean only where the files match its trees).
set -euo pipefail
head=$(git rev-parse HEAD)
rm -rf .devgit
git init -q --bare .devgit
git rev-list --objects --filter=blob:none --no-object-names --max-count=1 "$head" \
  | git pack-objects -q --stdout | git -C .devgit index-pack --stdin >/dev/null
echo "$head" >.devgit/shallow
git -C .devgit update-ref refs/heads/main "$head"
git -C .devgit symbolic-ref HEAD refs/heads/main
echo "$head"
