/**
 * The container build (deploy/images/Dockerfile): one multi-stage file, a target per component, generated here
 * so the image's entrypoints and paths are the ones the manifests are written against (the manifests pass only
 * args; the entrypoint and SBX_* environment come from the image). The base is pinned by version; `--build-arg
 * NODE_IMAGE` swaps it (a mirror, or a locally made base: scripts/build-images.sh).
 */
import { SANDBOXD_CACHE } from './workloads.js';

/** Node 20 like the project (engines >= 20.19), Debian bookworm like the guest root filesystems. */
export const NODE_IMAGE = 'docker.io/library/node:20.20.2-bookworm-slim';
export const APP_DIR = '/app';
/** The build context (\`--build-context guest=<dir>\`) holding the exported guest images for the sandboxd target. */
export const GUEST_CONTEXT = 'guest';
/** Where the sandboxd image keeps the prebuilt guest images (SBX_GUEST_IMAGES, src/guest/prebuilt.ts). */
export const GUEST_IMAGES_DIR = '/opt/sandbox-operator/guest';
/** The unprivileged user of the operator and apiserver images (the manifests' runAsUser). */
export const IMAGE_USER = 65532;

/**
 * After `tsc`, the files under src/ the built JS reads at run time (the generated JSON schemas, the guest build's
 * assets) go next to it: tsc emits only what it compiles. The Dockerfile and test/deploy/entrypoints.test.ts run
 * this same command.
 */
export const COPY_RUNTIME_FILES = "cd src && find . -type f ! -name '*.ts' -exec cp --parents {} ../dist/src/ ';'";

/** Each image target and the built JS it runs: the entrypoint the manifests' args are given to. */
export const IMAGE_TARGETS = {
  operator: { entrypoint: 'dist/src/operator/main.js' },
  apiserver: { entrypoint: 'dist/src/apiserver/main.js' },
  sandboxd: { entrypoint: 'dist/src/sandboxd/main.js' },
} as const;

const entrypoint = (t: keyof typeof IMAGE_TARGETS) =>
  `ENTRYPOINT ["node", "${APP_DIR}/${IMAGE_TARGETS[t].entrypoint}"]`;

export function dockerfile(header: string): string {
  return `${header}# Build one component (scripts/build-images.sh does all of this, caches the bases and writes OCI archives):
#   node --import tsx scripts/build-guest-images.ts --export <dir>    # sandboxd only: the guest images, see below
#   buildah bud --layers --target <operator|apiserver|sandboxd> --build-context ${GUEST_CONTEXT}=<dir> -f deploy/images/Dockerfile .
# (or docker buildx build --build-context ${GUEST_CONTEXT}=<dir> --target ...). The manifests in deploy/helm and
# deploy/kustomize run these entrypoints.
#
# Layer order is for rebuild time: what changes rarely (the base, Debian packages, npm dependencies keyed by
# package-lock.json, the guest images) sits below what changes on every commit (the JS), so a change under src/
# re-runs only tsc and the final COPYs.
ARG NODE_IMAGE=${NODE_IMAGE}

# The production node_modules, rebuilt only when package.json or package-lock.json change.
FROM \${NODE_IMAGE} AS deps
# Extra CAs for npm behind a TLS-inspecting proxy (scripts/build-images.sh passes them); empty: Node's own list.
ARG NODE_EXTRA_CA_CERTS=
WORKDIR ${APP_DIR}
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

# The built JS: all dependencies (cached like the above), then tsc over src/.
FROM \${NODE_IMAGE} AS js
ARG NODE_EXTRA_CA_CERTS=
WORKDIR ${APP_DIR}
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
RUN npm ci --no-audit --no-fund
COPY src ./src
RUN npx tsc -p tsconfig.build.json && (${COPY_RUNTIME_FILES})

FROM \${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR ${APP_DIR}
COPY --from=deps ${APP_DIR} ./
COPY --from=js ${APP_DIR}/dist/src ./dist/src

FROM runtime AS operator
USER ${IMAGE_USER}:${IMAGE_USER}
${entrypoint('operator')}

FROM runtime AS apiserver
USER ${IMAGE_USER}:${IMAGE_USER}
${entrypoint('apiserver')}

# sandboxd runs as root to start QEMU, which drops to nobody (-runas), and to make networked VMs' namespaces, veths
# and nftables rules (iproute2, nftables; nsenter is util-linux, essential in Debian). Its own base, not runtime's:
# QEMU and the guest images stay cached below the JS.
#
# The guest kernel, initramfs (with the static Go agent) and root filesystems come from the build context
# "${GUEST_CONTEXT}": a directory written by \`scripts/build-guest-images.ts --export\` (src/guest/prebuilt.ts), which
# builds them on the host or takes them from its version-keyed cache. They are not compiled here: the kernel build
# alone takes 5-15 minutes and needs Go, the kernel source and a toolchain that have no place in this image. On a
# machine without the cache the export builds them first, so a build from scratch is the same two commands.
FROM \${NODE_IMAGE} AS sandboxd
RUN apt-get update && apt-get install -y --no-install-recommends qemu-system-x86 iproute2 nftables && rm -rf /var/lib/apt/lists/*
COPY --from=${GUEST_CONTEXT} . ${GUEST_IMAGES_DIR}
ENV NODE_ENV=production SBX_GUEST_IMAGES=${GUEST_IMAGES_DIR} SBX_CACHE_DIR=${SANDBOXD_CACHE}
WORKDIR ${APP_DIR}
${entrypoint('sandboxd')}
COPY --from=deps ${APP_DIR} ./
COPY --from=js ${APP_DIR}/dist/src ./dist/src
`;
}
