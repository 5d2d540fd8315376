#!/usr/bin/env bash
# Installs everything `npm test` and `npm run up` need on a fresh machine, and checks what it cannot install.
# Idempotent and quick when everything is already there. Heavy builds are cached outside the repo
# (${SBX_CACHE_DIR:-~/.cache/sandbox-operator}), keyed by version.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  iproute2 nftables                     # local cluster: network namespaces; networked VMs: per-VM netns + egress rules
  qemu-system-x86 busybox-static cpio lz4 e2fsprogs   # microVMs (QEMU microvm, TCG here)
  linux-source-6.1 flex bison libelf-dev bc libssl-dev make gcc xz-utils  # the minimal guest kernel, built once
  runc containernetworking-plugins iptables conntrack socat  # real worker nodes: containerd's OCI runtime, pod
                                        # networking, kube-proxy's rules, port-forward (containerd itself is built)
  buildah mmdebstrap                    # the component images (scripts/build-images.sh) the chart runs on real nodes
)

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

command -v node >/dev/null || die "node not found: install Node.js >= 20.19"
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' \
  || die "Node.js $(node --version) is too old: install Node.js >= 20.19"
command -v go >/dev/null || die "go not found: install Go >= 1.26 (or set SANDBOX_K8S_BIN_DIR to prebuilt etcd/Kubernetes/kwok binaries)"

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing Debian packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})"
  fi
fi

if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
  say "installing npm dependencies (npm ci)"
  npm ci --no-audit --no-fund >&2
fi

say "obtaining etcd / Kubernetes / kwok, kubelet / kube-proxy / containerd / CoreDNS binaries (cached; the first build takes a while)"
node --import tsx scripts/obtain-binaries.ts --real-nodes >/dev/null

say "building guest images: kernel, initramfs, root filesystems (cached; the first build takes a while)"
node --import tsx scripts/build-guest-images.ts >/dev/null
