#!/usr/bin/env bash
# Builds the component images from deploy/images/Dockerfile without a Docker engine: buildah with the vfs
# storage driver and chroot isolation (both work unprivileged-ish, inside containers and on this machine).
#
#   scripts/build-images.sh [operator|apiserver|sandboxd ...]      (default: all three)
#
# The Dockerfile's bases are the pinned official images (NODE_IMAGE, GO_IMAGE). Where no container registry is
# reachable, SBX_LOCAL_BASES=1 makes equivalent bases first, from what this machine has: a Debian bookworm root
# filesystem from Debian's own packages (mmdebstrap) plus this machine's Node.js (which must be the pinned
# version) or Go toolchain, laid out as the official images lay them out. SBX_BUILD_CA_BUNDLE (default
# $SSL_CERT_FILE) is the CA bundle the build's downloads trust. Images are tagged
# <component>:<package.json version>, the chart's default image names.
set -euo pipefail
cd "$(dirname "$0")/.."

export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
say() { printf '[build-images] %s\n' "$*" >&2; }
die() { printf '[build-images] error: %s\n' "$*" >&2; exit 1; }

command -v buildah >/dev/null || die "buildah not found: apt-get install buildah (Debian's package)"
version=$(node -p 'require("./package.json").version')
targets=("$@")
((${#targets[@]})) || targets=(operator apiserver sandboxd)
# The pinned bases, as written in the Dockerfile.
node_image=$(sed -n 's/^ARG NODE_IMAGE=//p' deploy/images/Dockerfile)
go_image=$(sed -n 's/^ARG GO_IMAGE=//p' deploy/images/Dockerfile)
build_args=()

if [[ ${SBX_LOCAL_BASES:-} == 1 ]]; then
  command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap"
  node_version=${node_image#*node:}; node_version=${node_version%%-*}
  go_version=${go_image#*golang:}; go_version=${go_version%%-*}
  [[ $(node --version) == "v$node_version" ]] || die "this machine's Node.js is $(node --version), the pinned base is $node_version"
  [[ $(go env GOVERSION) == "go$go_version" ]] || die "this machine's Go is $(go env GOVERSION), the pinned base is $go_version"
  cache=${SBX_CACHE_DIR:-$HOME/.cache/sandbox-operator}/images
  mkdir -p "$cache"
  rootfs=$cache/bookworm-minbase.tar
  if [[ ! -s $rootfs ]]; then
    say "making a Debian bookworm root filesystem with mmdebstrap (a few minutes)"
    # mmdebstrap picks the output format from the name: keep it ending in .tar.
    mmdebstrap --variant=minbase --include=ca-certificates bookworm "${rootfs%.tar}.tmp.tar" http://deb.debian.org/debian >&2
    mv "${rootfs%.tar}.tmp.tar" "$rootfs"
  fi
  base() { # <image> <setup...>: the bookworm root filesystem plus what the setup copies in
    local image=$1; shift
    if buildah inspect --type image "$image" >/dev/null 2>&1; then return; fi
    say "making base image $image"
    local c; c=$(buildah from scratch)
    buildah add "$c" "$rootfs" / >/dev/null
    "$@" "$c"
    buildah commit -q --rm "$c" "$image" >/dev/null
  }
  with_node() {
    buildah copy "$1" "$(command -v node)" /usr/local/bin/node >/dev/null
    buildah copy "$1" "$(dirname "$(readlink -f "$(command -v npm)")")/.." /usr/local/lib/node_modules/npm >/dev/null
    buildah run "$1" -- sh -c 'ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx'
  }
  with_go() { buildah copy "$1" "$(go env GOROOT)" /usr/local/go >/dev/null; }
  local_node=localhost/sbx-base/node:$node_version-bookworm
  local_go=localhost/sbx-base/golang:$go_version-bookworm
  base "$local_node" with_node
  base "$local_go" with_go
  build_args+=(--build-arg "NODE_IMAGE=$local_node" --build-arg "GO_IMAGE=$local_go")
fi

# Behind a TLS-inspecting egress proxy the build's npm, Go and apt need this machine's CA bundle: mounted for the
# build only (never in an image layer) and handed to Node, which otherwise trusts only its own list.
ca_bundle=${SBX_BUILD_CA_BUNDLE:-${SSL_CERT_FILE:-}}
if [[ -n $ca_bundle && -s $ca_bundle ]]; then
  build_args+=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" --build-arg NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt)
fi

for t in "${targets[@]}"; do
  case $t in
    operator) tag=sandbox-operator ;;
    apiserver) tag=sandbox-apiserver ;;
    sandboxd) tag=sandboxd ;;
    *) die "unknown target $t: one of operator, apiserver, sandboxd" ;;
  esac
  say "building $tag:$version (target $t)"
  buildah bud --layers --target "$t" "${build_args[@]}" -t "$tag:$version" -f deploy/images/Dockerfile . >&2
  printf '%s:%s\n' "$tag" "$version"
done
