#!/usr/bin/env bash
# Builds the component images from deploy/images/Dockerfile without a Docker engine: buildah with chroot isolation
# and its default storage driver (overlay on this machine; STORAGE_DRIVER=vfs where overlay cannot mount, e.g.
# inside a container: passed as --storage-driver, since Debian's buildah 1.28 ignores the variable itself).
#
#   scripts/build-images.sh [--archive-dir DIR] [--guest-dir DIR] [operator|apiserver|sandboxd ...]   (default: all three)
#
# Images are tagged <image>:<package.json version> (sandbox-operator, sandbox-apiserver, sandboxd), the chart's
# default image names. --archive-dir DIR also writes DIR/<target>.tar, an image archive whose image is named what the
# chart's default resolves to on a node (docker.io/library/<image>:<version>, the normalised short name), so
# `ctr -n k8s.io images import DIR/<target>.tar` makes it runnable with pullPolicy IfNotPresent and no registry.
# The archive is in the docker-archive layout (manifest.json + uncompressed layer tars; containerd imports it like
# an OCI one and normalises its RepoTags), not oci-archive: buildah 1.28 gzips every layer of an oci-archive
# whatever --disable-compression says, which took 30 s of the sandboxd image's 40 s push (docker-archive: 10 s),
# and these archives only travel to a containerd on the same machine.
#
# The sandboxd image takes the guest kernel, initramfs and root filesystems from a directory (the Dockerfile's
# `guest` build context): --guest-dir DIR if given (written by `scripts/build-guest-images.ts --export DIR`),
# otherwise this script exports them itself, which builds them on a machine without the cache (5-15 minutes once).
#
# The Dockerfile's base is the pinned official Node image (NODE_IMAGE). Where no container registry is
# reachable, SBX_LOCAL_BASES=1 makes an equivalent base first, from what this machine has: a Debian bookworm root
# filesystem from Debian's own packages (mmdebstrap) plus this machine's Node.js (which must be the pinned
# version), laid out as the official image lays it out, and cached (the root filesystem under
# ${SBX_CACHE_DIR:-~/.cache/sandbox-operator}/images, the image in buildah's storage). SBX_BUILD_CA_BUNDLE
# (default $SSL_CERT_FILE) is the CA bundle the build's downloads trust.
set -euo pipefail
cd "$(dirname "$0")/.."

export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
buildah() { command buildah ${STORAGE_DRIVER:+--storage-driver "$STORAGE_DRIVER"} "$@"; }
say() { printf '[build-images] %s\n' "$*" >&2; }
die() { printf '[build-images] error: %s\n' "$*" >&2; exit 1; }

command -v buildah >/dev/null || die "buildah not found: apt-get install buildah (Debian's package)"
version=$(node -p 'require("./package.json").version')
archive_dir='' guest_dir='' targets=()
while (($#)); do
  case $1 in
    --archive-dir) archive_dir=${2:?--archive-dir needs a directory}; shift 2 ;;
    --guest-dir) guest_dir=${2:?--guest-dir needs a directory}; shift 2 ;;
    -*) die "unknown option $1: --archive-dir DIR, --guest-dir DIR" ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(operator apiserver sandboxd)
# The pinned base, as written in the Dockerfile.
node_image=$(sed -n 's/^ARG NODE_IMAGE=//p' deploy/images/Dockerfile)
build_args=()

if [[ ${SBX_LOCAL_BASES:-} == 1 ]]; then
  command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap"
  node_version=${node_image#*node:}; node_version=${node_version%%-*}
  [[ $(node --version) == "v$node_version" ]] || die "this machine's Node.js is $(node --version), the pinned base is $node_version"
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
  local_node=localhost/sbx-base/node:$node_version-bookworm
  base "$local_node" with_node
  build_args+=(--build-arg "NODE_IMAGE=$local_node")
fi

# Behind a TLS-inspecting egress proxy the build's npm, Go and apt need this machine's CA bundle: mounted for the
# build only (never in an image layer) and handed to Node, which otherwise trusts only its own list.
ca_bundle=${SBX_BUILD_CA_BUNDLE:-${SSL_CERT_FILE:-}}
if [[ -n $ca_bundle && -s $ca_bundle ]]; then
  build_args+=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro" --build-arg NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt)
fi

if [[ " ${targets[*]} " == *" sandboxd "* ]]; then
  if [[ -z $guest_dir ]]; then
    guest_dir=$(mktemp -d "${TMPDIR:-/tmp}/sbx-guest-images.XXXXXX")
    trap 'rm -rf "$guest_dir"' EXIT
    say "exporting the guest images (built first if this machine's cache lacks them)"
    node --import tsx scripts/build-guest-images.ts --export "$guest_dir" >&2
  fi
  [[ -s $guest_dir/images.json ]] || die "$guest_dir/images.json missing: write it with node --import tsx scripts/build-guest-images.ts --export $guest_dir"
  build_args+=(--build-context "guest=$guest_dir")
fi
[[ -z $archive_dir ]] || mkdir -p "$archive_dir"

for t in "${targets[@]}"; do
  case $t in
    operator) tag=sandbox-operator ;;
    apiserver) tag=sandbox-apiserver ;;
    sandboxd) tag=sandboxd ;;
    *) die "unknown target $t: one of operator, apiserver, sandboxd" ;;
  esac
  say "building $tag:$version (target $t)"
  buildah bud --layers --target "$t" "${build_args[@]}" -t "$tag:$version" -f deploy/images/Dockerfile . >&2
  if [[ -n $archive_dir ]]; then
    # The name a node's CRI resolves the chart's short default to (docker.io/library/...), written to the archive's
    # RepoTags, which `ctr images import` normalises and stores as the image name.
    rm -f "$archive_dir/$t.tar"
    buildah push -q "$tag:$version" "docker-archive:$archive_dir/$t.tar:docker.io/library/$tag:$version" >/dev/null
    say "wrote $archive_dir/$t.tar (docker.io/library/$tag:$version)"
  fi
  printf '%s:%s\n' "$tag" "$version"
done

# Each source change leaves the previous build's top layers behind as untagged images (tens of MB each time).
# Naming the two build stages keeps their cached layers (npm ci) reachable from a tag, so pruning the untagged
# images drops only what no later build reuses. Both stage builds are all cache hits here.
for stage in deps js; do
  buildah bud --layers --target "$stage" "${build_args[@]}" -t "localhost/sbx-cache/$stage:latest" -f deploy/images/Dockerfile . >/dev/null
done
buildah rmi --prune >/dev/null || say "pruning untagged images failed (harmless: they only take disk space)"
