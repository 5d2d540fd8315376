/**
 * The container build (deploy/images/Dockerfile): one multi-stage file, a target per component, generated here
 * so the image's entrypoints and paths are the ones the manifests are written against (the manifests pass only
 * args; the entrypoint and SBX_* environment come from the image). Bases are pinned by version; `--build-arg`
 * NODE_IMAGE / GO_IMAGE swaps them (a mirror, or locally made bases: scripts/build-images.sh).
 */
import { SANDBOXD_CACHE } from './workloads.js';

/** Node 20 like the project (engines >= 20.19), Debian bookworm like the guest root filesystems. */
export const NODE_IMAGE = 'docker.io/library/node:20.20.2-bookworm-slim';
export const GO_IMAGE = 'docker.io/library/golang:1.26.8-bookworm';
export const APP_DIR = '/app';
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

/** Debian packages of the guest image build (scripts/bootstrap.sh installs the same on a dev machine). */
const GUEST_BUILD_PACKAGES = [
  'busybox-static',
  'cpio',
  'lz4',
  'e2fsprogs',
  'linux-source-6.1',
  'flex',
  'bison',
  'libelf-dev',
  'bc',
  'libssl-dev',
  'make',
  'gcc',
  'xz-utils',
  'ca-certificates',
];

const entrypoint = (t: keyof typeof IMAGE_TARGETS) =>
  `ENTRYPOINT ["node", "${APP_DIR}/${IMAGE_TARGETS[t].entrypoint}"]`;

export function dockerfile(header: string): string {
  return `${header}# Build one component: buildah bud --target <operator|apiserver|sandboxd> -f deploy/images/Dockerfile .
# (or docker build --target ...). The manifests in deploy/helm and deploy/kustomize run these entrypoints.
ARG NODE_IMAGE=${NODE_IMAGE}
ARG GO_IMAGE=${GO_IMAGE}

FROM \${GO_IMAGE} AS go

# The built JS and the production node_modules.
FROM \${NODE_IMAGE} AS js
# Extra CAs for npm behind a TLS-inspecting proxy (scripts/build-images.sh passes them); empty: Node's own list.
ARG NODE_EXTRA_CA_CERTS=
WORKDIR ${APP_DIR}
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx tsc -p tsconfig.build.json && (${COPY_RUNTIME_FILES}) && npm prune --omit=dev --no-audit --no-fund

# The guest kernel, the initramfs with the static Go agent and the root filesystems, built by the project's own
# builder (src/guest/build), then exported for SBX_GUEST_IMAGES.
FROM \${NODE_IMAGE} AS guest
ARG NODE_EXTRA_CA_CERTS=
COPY --from=go /usr/local/go /usr/local/go
ENV PATH=/usr/local/go/bin:$PATH SBX_CACHE_DIR=/var/cache/guest-build
RUN apt-get update && apt-get install -y --no-install-recommends ${GUEST_BUILD_PACKAGES.join(' ')} && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json tsconfig.json ./
COPY --from=js ${APP_DIR}/node_modules ./node_modules
COPY src ./src
COPY scripts ./scripts
COPY agent ./agent
RUN apt-get update && node --import tsx scripts/build-guest-images.ts --export ${GUEST_IMAGES_DIR} && rm -rf /var/lib/apt/lists/*

FROM \${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR ${APP_DIR}
COPY --from=js ${APP_DIR}/package.json ./
COPY --from=js ${APP_DIR}/node_modules ./node_modules
COPY --from=js ${APP_DIR}/dist/src ./dist/src

FROM runtime AS operator
USER ${IMAGE_USER}:${IMAGE_USER}
${entrypoint('operator')}

FROM runtime AS apiserver
USER ${IMAGE_USER}:${IMAGE_USER}
${entrypoint('apiserver')}

# sandboxd runs as root to start QEMU, which drops to nobody (-runas), and to make networked VMs' namespaces, veths
# and nftables rules (iproute2, nftables; nsenter is util-linux, essential in Debian).
FROM runtime AS sandboxd
RUN apt-get update && apt-get install -y --no-install-recommends qemu-system-x86 iproute2 nftables && rm -rf /var/lib/apt/lists/*
COPY --from=guest ${GUEST_IMAGES_DIR} ${GUEST_IMAGES_DIR}
ENV SBX_GUEST_IMAGES=${GUEST_IMAGES_DIR} SBX_CACHE_DIR=${SANDBOXD_CACHE}
${entrypoint('sandboxd')}
`;
}
