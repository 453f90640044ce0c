#!/usr/bin/env bash
# The action's step: run the provision or release binary for this runner's OS and architecture.
# Release tags carry prebuilt binaries in dist/ (make dist); on a branch without them, the binary
# is built from source with the runner's Go, if it has one.
set -euo pipefail
root=${HANGAR_ACTION_PATH:?HANGAR_ACTION_PATH is not set}
mode=${HANGAR_MODE:-}
case "$mode" in
  provision|release) ;;
  *) echo "::error title=Hangar::mode: \"$mode\": want provision or release"; exit 2 ;;
esac
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in
  x86_64|amd64) arch=amd64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) echo "::error title=Hangar::unsupported architecture $(uname -m)"; exit 2 ;;
esac
bin="$root/dist/hangar-$mode-$os-$arch"
if [ ! -x "$bin" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "::error title=Hangar::no prebuilt $mode binary for $os/$arch in this ref of the action, and no Go to build one: use a release tag (hangar-ci/hangar@v1)"
    exit 2
  fi
  echo "::group::Building the $mode step from source"
  bin="${RUNNER_TEMP:-/tmp}/hangar-$mode"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$bin" "./cmd/$mode")
  echo "::endgroup::"
fi
exec "$bin"
