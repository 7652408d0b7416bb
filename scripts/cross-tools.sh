#!/usr/bin/env bash
# Installs what the cross-target tests need, when it is missing: Debian's C cross compilers for
# aarch64 and riscv64 (they link objects from `kiln compile --target ...`) and qemu's user-mode
# emulators (they run the linked programs). Idempotent; needs root for apt-get.
set -euo pipefail
need=()
for tool in aarch64-linux-gnu-gcc riscv64-linux-gnu-gcc qemu-aarch64 qemu-riscv64; do
    command -v "$tool" >/dev/null || need+=("$tool")
done
if [[ ${#need[@]} -eq 0 ]]; then
    exit 0
fi
echo "installing cross compilers and qemu-user (missing: ${need[*]})" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu \
    libc6-dev-arm64-cross libc6-dev-riscv64-cross qemu-user >/dev/null
