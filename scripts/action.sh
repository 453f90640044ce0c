#!/usr/bin/env bash
# The action's step (action.yml): run the binary of the mode for this runner's OS and
# architecture: provision and release each have their own (cmd/provision, cmd/release; assets
# hangar-provision-<os>-<arch>, hangar-release-<os>-<arch>); refresh is `hangar refresh`
# (cmd/hangar; asset hangar-<os>-<arch>).
#
#   1. A release (the input version, or else the tag the action is used at, such as v1 or
#      v1.4.2): download <release-url>/<version>/checksums.txt, then the mode's binary unless
#      the tool cache holds it, and run it only if its SHA-256 is
#      the one the checksums file lists. The checksums file is fetched every time (it is small),
#      so a cached binary is verified before every run: a tool cache shared with earlier jobs
#      cannot slip in another binary. A mismatch stops the step; it never falls back.
#   2. No release (a branch, a fork, uses: ./), or a release without this binary: build it from
#      the action's own source with the runner's Go into RUNNER_TEMP, or say what to do.
#
# Inputs arrive as HANGAR_* variables (action.yml); GITHUB_* and RUNNER_* come from the runner.
set -euo pipefail

fail() { echo "::error title=Hangar::$*"; exit 2; }

root=${HANGAR_ACTION_PATH:?HANGAR_ACTION_PATH is not set: run this script through action.yml}
mode=${HANGAR_MODE:-}
# cmd: the command under cmd/ that runs the mode; name: its binary's (and release asset's) name;
# sub: the subcommand it runs, if any.
case "$mode" in
  provision|release) cmd=$mode; name=hangar-$mode; sub= ;;
  refresh) cmd=hangar; name=hangar; sub=refresh ;;
  *) fail "mode: \"$mode\": want provision, release or refresh" ;;
esac

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  MINGW*|MSYS*|CYGWIN*) os=windows ;;
  *) fail "unsupported OS $(uname -s): Hangar's step runs on Linux, macOS and Windows" ;;
esac
case "$(uname -m)" in
  x86_64|amd64) arch=amd64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) fail "unsupported architecture $(uname -m): Hangar's step runs on amd64 and arm64" ;;
esac
ext=""
if [ "$os" = windows ]; then ext=.exe; fi
asset="$name-$os-$arch$ext"

# The action's repository and ref: from the runner's context, or else from where the runner put
# the action (…/_actions/<owner>/<repo>/<ref>), which composite actions always know.
repository=${HANGAR_ACTION_REPOSITORY:-}
ref=${HANGAR_ACTION_REF:-}
if [ -z "$ref" ] && [[ "$root" =~ /_actions/([^/]+)/([^/]+)/([^/]+)/?$ ]]; then
  repository="${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
  ref="${BASH_REMATCH[3]}"
fi
version=${HANGAR_VERSION:-}
if [ -z "$version" ] && [[ "$ref" =~ ^v[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?$ ]]; then
  version=$ref
fi
if [ -n "$version" ] && ! [[ "$version" =~ ^v[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?$ ]]; then
  fail "version: \"$version\": want a release tag such as v1 or v1.4.2"
fi

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# fetch URL FILE: download over https (plain http only from a loopback mirror, for tests);
# exit status 22 means the server answered with an error such as 404.
fetch() {
  case "$1" in
    https://*) ;;
    http://127.0.0.1[:/]*|http://localhost[:/]*|http://\[::1\][:/]*) ;;
    *) fail "release-url: \"$1\": want an https URL" ;;
  esac
  curl --fail --silent --show-error --location --proto-redir =https --retry 3 --retry-connrefused --connect-timeout 10 --max-time 300 \
    --output "$2" "$1"
}

bin=""
if [ -n "$version" ]; then
  command -v curl >/dev/null 2>&1 || fail "curl is needed to download Hangar's $mode binary; install it on the runner"
  base=${HANGAR_RELEASE_URL:-}
  if [ -z "$base" ]; then
    [ -n "$repository" ] || fail "cannot tell which repository this action comes from: set the release-url input"
    base="${GITHUB_SERVER_URL:-https://github.com}/$repository/releases/download"
  fi
  base=${base%/}
  cache="${RUNNER_TOOL_CACHE:-${RUNNER_TEMP:-/tmp}}/hangar/$version/$os-$arch"
  mkdir -p "$cache"
  sums="$cache/checksums.txt.$$"
  trap 'rm -f "$sums" "$cache/$asset.$$"' EXIT
  if ! fetch "$base/$version/checksums.txt" "$sums"; then
    echo "::warning title=Hangar::no checksums file at $base/$version/checksums.txt: building the $mode step from source instead"
  else
    want=$(awk -v f="$asset" '$2 == f || $2 == "*" f { print $1; exit }' "$sums")
    if [ -z "$want" ]; then
      echo "::warning title=Hangar::release $version lists no $asset: building the $mode step from source instead"
    else
      cached="$cache/$asset"
      # Run a private copy, checked after copying: the cache may be shared with other jobs.
      bin="${RUNNER_TEMP:-/tmp}/$name-$$$ext"
      if [ -f "$cached" ] && cp "$cached" "$bin" && [ "$(sha256 "$bin")" = "$want" ]; then
        chmod 0755 "$bin"
        echo "Hangar $version $mode ($os/$arch) from the tool cache, SHA-256 $want"
      else
        echo "Downloading $base/$version/$asset"
        fetch "$base/$version/$asset" "$cache/$asset.$$" || fail "download $base/$version/$asset failed"
        got=$(sha256 "$cache/$asset.$$")
        if [ "$got" != "$want" ]; then
          fail "checksum mismatch for $asset of release $version: the release's checksums.txt lists $want, the download is $got; not running it"
        fi
        chmod 0755 "$cache/$asset.$$"
        cp "$cache/$asset.$$" "$bin"
        mv -f "$cache/$asset.$$" "$cached"
        echo "Hangar $version $mode ($os/$arch) verified, SHA-256 $got"
      fi
    fi
  fi
fi

if [ -z "$bin" ]; then
  if ! command -v go >/dev/null 2>&1; then
    fail "no release binary of the $mode step for this ref of the action (${ref:-a local path}), and no Go to build one: use a release tag (uses: hangar-ci/hangar@v1), set the version input to a release when pinning by commit, or add actions/setup-go before this step"
  fi
  echo "::group::Building the $mode step from source (no release binary for ${version:-${ref:-this ref}})"
  bin="${RUNNER_TEMP:-/tmp}/$name-$$"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$bin" "./cmd/$cmd")
  echo "::endgroup::"
fi

[ -n "${sums:-}" ] && rm -f "$sums"
trap - EXIT
if [ -n "$sub" ]; then
  exec "$bin" "$sub"
fi
exec "$bin"
