#!/usr/bin/env bash
# Install what the native reader's build needs (cmake, a C++17 compiler, pkg-config,
# libxxhash-dev, libssl-dev) from Debian's packages, only when something is missing.
# Idempotent and quiet: a machine that already has everything runs no apt command.
set -euo pipefail

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v make >/dev/null 2>&1 || command -v ninja >/dev/null 2>&1 || need+=(make)
if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists libxxhash 2>/dev/null || need+=(libxxhash-dev)
    pkg-config --exists libcrypto 2>/dev/null || need+=(libssl-dev)
else
    need+=(libxxhash-dev libssl-dev)
fi

if [ "${#need[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "native/ci-deps.sh: missing ${need[*]}; run as root or install them: apt-get install ${need[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "native/ci-deps.sh: installing ${need[*]}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# apt's chatter goes to a log that is shown only when a step fails.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "native/ci-deps.sh: apt-get failed installing ${need[*]}" >&2
    exit 1
fi
