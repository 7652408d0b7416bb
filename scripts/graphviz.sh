#!/usr/bin/env bash
# Installs Graphviz when `dot` is missing (`kiln dump --format svg` runs it; the CLI's picture
# test renders one). Idempotent; needs root for apt-get.
set -euo pipefail
command -v dot >/dev/null && exit 0
echo "installing graphviz (dot is missing)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends graphviz >/dev/null
