import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { access, chmod, constants, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { SandboxError } from '../errors.js';
import { withFileLock } from './file-lock.js';
import { COMPONENTS, MIN_GO_VERSION, type ComponentName, type ComponentSpec } from './versions.js';

/**
 * Obtains the pinned Kubernetes, etcd and kwok binaries, in this order:
 *   1. an explicit directory (option / SANDBOX_K8S_BIN_DIR),
 *   2. the cache outside the repo (<cacheDir>/bin/<component>-<version>/),
 *   3. a `go build` from the Go module proxy (the way this machine gets them),
 *   4. on machines with internet and no Go, the official release downloads.
 * Builds take a file lock so concurrent test processes build once.
 */

export interface ObtainOptions {
  cacheDir: string;
  binDir?: string | undefined;
  /** Progress lines (building takes minutes the first time). */
  progress?: (line: string) => void;
}

export type BinaryPaths = Record<string, string>;

const COMPLETE_MARKER = '.complete';
/** kwok needs Stage definitions; we ship its own "fast" node/pod stages next to the binary. */
export const KWOK_STAGES_FILE = 'kwok-stages.yaml';
const KWOK_STAGE_FILES = [
  'kustomize/stage/node/fast/node-initialize.yaml',
  'kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml',
  'kustomize/stage/pod/fast/pod-ready.yaml',
  'kustomize/stage/pod/fast/pod-complete.yaml',
  'kustomize/stage/pod/fast/pod-delete.yaml',
];

async function kwokStages(buildDir: string): Promise<string> {
  const res = spawnSync('go', ['list', '-m', '-f', '{{.Dir}}', 'sigs.k8s.io/kwok'], {
    cwd: buildDir,
    encoding: 'utf8',
  });
  if (res.status !== 0) throw new SandboxError('cluster.build', `cannot locate the kwok module: ${res.stderr}`);
  const dir = res.stdout.trim();
  const docs = await Promise.all(KWOK_STAGE_FILES.map((f) => readFile(join(dir, f), 'utf8')));
  return docs.map((d) => d.trim()).join('\n---\n') + '\n';
}

export async function obtainAll(opts: ObtainOptions): Promise<BinaryPaths> {
  const paths: BinaryPaths = {};
  // Sequential on purpose: each Go build already uses every core.
  for (const spec of Object.values(COMPONENTS)) if (!spec.onDemand) Object.assign(paths, await obtain(spec.name, opts));
  return paths;
}

export async function obtain(name: ComponentName, opts: ObtainOptions): Promise<BinaryPaths> {
  const spec = COMPONENTS[name];
  // SANDBOX_K8S_BIN_DIR holds the control plane's binaries; a tool built on demand is used from there when present.
  if (opts.binDir && (!spec.onDemand || (await isExecutable(join(opts.binDir, spec.binaries[0] ?? spec.name)))))
    return checkExplicitDir(spec, opts.binDir);
  const dir = cachedBinDir(opts.cacheDir, spec);
  if (await isComplete(dir)) return pathsIn(spec, dir);
  return withFileLock(join(opts.cacheDir, 'locks', `${spec.name}-${spec.version}.lock`), opts.progress, async () => {
    if (await isComplete(dir)) return pathsIn(spec, dir); // another process built it while we waited
    const go = findGo();
    if (go.ok) await buildWithGo(spec, opts.cacheDir, dir, opts.progress ?? (() => {}));
    else if (await hasInternet()) await download(spec, opts.cacheDir, dir, opts.progress ?? (() => {}));
    else
      throw new SandboxError('cluster.no-go', `${go.reason}; cannot build ${spec.name} ${spec.version}`, {
        hint: `install Go >= ${MIN_GO_VERSION} (the Go module proxy must be reachable) or set SANDBOX_K8S_BIN_DIR to a directory with ${allBinaryNames().join(', ')}`,
      });
    return pathsIn(spec, dir);
  });
}

export function cachedBinDir(cacheDir: string, spec: ComponentSpec): string {
  return join(cacheDir, 'bin', `${spec.name}-${spec.version}`);
}

/** The component's binaries if the cache holds a complete build of them; never builds (a test's "is it here?"). */
export async function cachedBinaries(name: ComponentName, cacheDir: string): Promise<BinaryPaths | undefined> {
  const spec = COMPONENTS[name];
  const dir = cachedBinDir(cacheDir, spec);
  return (await isComplete(dir)) ? pathsIn(spec, dir) : undefined;
}

function allBinaryNames(): string[] {
  return Object.values(COMPONENTS).flatMap((c) => c.binaries);
}

function pathsIn(spec: ComponentSpec, dir: string): BinaryPaths {
  return Object.fromEntries(spec.binaries.map((b) => [b, join(dir, b)]));
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

async function isComplete(dir: string): Promise<boolean> {
  try {
    await access(join(dir, COMPLETE_MARKER));
    return true;
  } catch {
    return false;
  }
}

/** How to ask a binary for its version without side effects, where `--version` is not the way. */
const VERSION_ARGS: Record<string, string[]> = {
  kubectl: ['version', '--client'],
  helm: ['version'],
  'containerd-shim-runc-v2': ['-v'],
  coredns: ['-version'],
};

/** A user-supplied directory must hold working binaries; say which one is missing or broken. */
async function checkExplicitDir(spec: ComponentSpec, dir: string): Promise<BinaryPaths> {
  const paths = pathsIn(spec, dir);
  for (const [bin, path] of Object.entries(paths)) {
    try {
      await access(path, constants.X_OK);
    } catch {
      throw new SandboxError('cluster.binary-missing', `${bin} not found or not executable at ${path}`, {
        hint: `put ${spec.name} ${spec.version} binaries in ${dir}, or unset SANDBOX_K8S_BIN_DIR to build them`,
      });
    }
    const res = spawnSync(path, VERSION_ARGS[bin] ?? ['--version'], {
      timeout: 15_000,
      encoding: 'utf8',
    });
    if (res.error || res.status !== 0) {
      const detail = (res.error?.message ?? res.stderr ?? '').trim().split('\n').slice(-3).join(' | ');
      throw new SandboxError(
        'cluster.binary-broken',
        `${bin} at ${path} does not run: ${detail || `exit ${res.status}`}`,
        {
          hint: `replace it with a working ${spec.name} ${spec.version} binary, or unset SANDBOX_K8S_BIN_DIR to build one`,
        },
      );
    }
  }
  return paths;
}

function findGo(): { ok: true } | { ok: false; reason: string } {
  const res = spawnSync('go', ['env', 'GOVERSION'], { encoding: 'utf8' });
  if (res.error) return { ok: false, reason: 'go not found' };
  const version = res.stdout.trim().replace(/^go/, '');
  const [maj = 0, min = 0] = version.split('.').map((n) => Number.parseInt(n, 10));
  const [wantMaj = 0, wantMin = 0] = MIN_GO_VERSION.split('.').map((n) => Number.parseInt(n, 10));
  if (maj < wantMaj || (maj === wantMaj && min < wantMin)) return { ok: false, reason: `go ${version} is too old` };
  return { ok: true };
}

async function hasInternet(): Promise<boolean> {
  try {
    const res = await fetch('https://dl.k8s.io/', { method: 'HEAD', signal: AbortSignal.timeout(3000) });
    return res.status < 500;
  } catch {
    return false;
  }
}

interface GoModule {
  goMod: string;
  main?: string;
  packages: string[];
  ldflags: string;
  /** Go build tags (`-tags`), e.g. to leave out parts that need cgo. */
  tags?: string[];
}

async function goModuleFor(spec: ComponentSpec, buildDir: string): Promise<GoModule> {
  switch (spec.name) {
    case 'kubernetes':
    case 'kubernetes-node':
      return kubernetesModule(spec, buildDir);
    case 'etcd':
      return {
        goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 ${spec.version}\n`,
        main: 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n',
        packages: ['.'],
        ldflags: '-s -w',
      };
    case 'kwok':
      return {
        goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok ${spec.version}\n`,
        packages: ['sigs.k8s.io/kwok/cmd/kwok'],
        ldflags: `-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${spec.version}`,
      };
    case 'helm': {
      const major = spec.version.split('.')[0];
      return {
        goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire helm.sh/helm/${major} ${spec.version}\n`,
        packages: [`helm.sh/helm/${major}/cmd/helm`],
        // Without it `helm version` says v4.3 and charts' kubeVersion checks see the wrong patch release.
        ldflags: `-s -w -X helm.sh/helm/${major}/internal/version.version=${spec.version} -X helm.sh/helm/${major}/internal/version.gitTreeState=clean`,
      };
    }
    case 'containerd': {
      const mod = 'github.com/containerd/containerd/v2';
      return {
        goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire ${mod} ${spec.version}\n`,
        packages: spec.binaries.map((b) => `${mod}/cmd/${b}`),
        // Its Makefile's ldflags: otherwise `containerd --version` says "2.x+unknown". The tags leave out the
        // snapshotters that need cgo or host tools (btrfs, devmapper, zfs); real nodes use overlayfs.
        ldflags: `-s -w -X ${mod}/version.Version=${spec.version} -X ${mod}/version.Package=${mod}`,
        tags: ['no_btrfs', 'no_devmapper', 'no_zfs'],
      };
    }
    case 'coredns':
      return {
        goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns ${spec.version}\n`,
        // Its main package is the module root; the plugin list (core/plugin/zplugin.go) is the default one.
        packages: ['github.com/coredns/coredns'],
        ldflags: `-s -w -X github.com/coredns/coredns/coremain.GitCommit=${spec.version}`,
      };
  }
}

/**
 * k8s.io/kubernetes requires its staging modules at v0.0.0 with ./staging replaces; mirror each replace onto the
 * published module of the matching minor (v1.X.Y -> v0.X.Y), read from its own go.mod. The control plane and the
 * node agents share this, so kubelet reports exactly the control plane's version.
 */
async function kubernetesModule(spec: ComponentSpec, buildDir: string): Promise<GoModule> {
  const info = await goJson(['mod', 'download', '-json', `k8s.io/kubernetes@${spec.version}`], buildDir);
  const upstream = await readFile(String(info.GoMod), 'utf8');
  const stagingVersion = spec.version.replace(/^v1\./, 'v0.');
  const replaces = [...upstream.matchAll(/^\s*(k8s\.io\/[\w.-]+)\s+=>\s+\.\/staging\//gm)].map(
    (m) => `\t${m[1]} => ${m[1]} ${stagingVersion}`,
  );
  if (replaces.length === 0)
    throw new SandboxError('cluster.build', 'no staging replaces found in k8s.io/kubernetes go.mod');
  const [, minor] = spec.version.match(/^v1\.(\d+)\./) ?? [];
  const pkg = 'k8s.io/component-base/version';
  return {
    goMod: `module sbxbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes ${spec.version}\n\nreplace (\n${replaces.join('\n')}\n)\n`,
    packages: spec.binaries.map((b) => `k8s.io/kubernetes/cmd/${b}`),
    ldflags: [
      '-s -w',
      `-X ${pkg}.gitVersion=${spec.version}`,
      `-X ${pkg}.gitMajor=1`,
      `-X ${pkg}.gitMinor=${minor}`,
      `-X ${pkg}.gitTreeState=clean`,
      `-X k8s.io/client-go/pkg/version.gitVersion=${spec.version}`,
    ].join(' '),
  };
}

async function buildWithGo(spec: ComponentSpec, cacheDir: string, target: string, progress: (l: string) => void) {
  const buildDir = join(cacheDir, 'build', `${spec.name}-${spec.version}`);
  const outDir = join(buildDir, 'out');
  await mkdir(outDir, { recursive: true });
  const mod = await goModuleFor(spec, buildDir);
  await writeFile(join(buildDir, 'go.mod'), mod.goMod);
  if (mod.main) await writeFile(join(buildDir, 'main.go'), mod.main);
  // tools.go pins the packages so `go mod tidy` keeps their dependencies.
  const imports = mod.packages.filter((p) => p !== '.').map((p) => `\t_ "${p}"`);
  if (imports.length)
    await writeFile(
      join(buildDir, 'tools.go'),
      `//go:build tools\n\npackage tools\n\nimport (\n${imports.join('\n')}\n)\n`,
    );
  progress(`[build ${spec.name} ${spec.version}] resolving modules from the Go module proxy`);
  await runGo(['mod', 'tidy'], buildDir, progress, spec);
  progress(`[build ${spec.name} ${spec.version}] compiling ${spec.binaries.join(', ')} (minutes on a cold cache)`);
  const outArg = mod.packages.length > 1 ? `${outDir}/` : join(outDir, spec.binaries[0] ?? spec.name);
  await runGo(
    [
      'build',
      '-v',
      '-trimpath',
      ...(mod.tags?.length ? [`-tags=${mod.tags.join(',')}`] : []),
      `-ldflags=${mod.ldflags}`,
      '-o',
      outArg,
      ...mod.packages,
    ],
    buildDir,
    progress,
    spec,
  );
  await installInto(target, async (tmp) => {
    for (const bin of spec.binaries) await rename(join(outDir, bin), join(tmp, bin));
    if (spec.name === 'kwok') await writeFile(join(tmp, KWOK_STAGES_FILE), await kwokStages(buildDir));
  });
  progress(`[build ${spec.name} ${spec.version}] done: ${target}`);
}

/** Fill a temp dir, then rename it into place, so a half-written cache entry is never visible. */
async function installInto(target: string, fill: (tmp: string) => Promise<void>) {
  const tmp = `${target}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await fill(tmp);
  await writeFile(join(tmp, COMPLETE_MARKER), new Date().toISOString());
  await rm(target, { recursive: true, force: true });
  await rename(tmp, target);
}

async function goJson(args: string[], cwd: string): Promise<Record<string, unknown>> {
  await mkdir(cwd, { recursive: true });
  const res = spawnSync('go', args, { cwd, encoding: 'utf8', env: { ...process.env, GOFLAGS: '-mod=mod' } });
  if (res.status !== 0) {
    throw new SandboxError(
      'cluster.build',
      `go ${args.join(' ')} failed: ${res.stderr.trim().split('\n').slice(-5).join(' | ')}`,
      {
        hint: 'check that the Go module proxy is reachable (go env GOPROXY)',
      },
    );
  }
  return JSON.parse(res.stdout) as Record<string, unknown>;
}

function runGo(args: string[], cwd: string, progress: (l: string) => void, spec: ComponentSpec): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn('go', args, {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, CGO_ENABLED: '0' },
    });
    let lines = 0;
    const tail: string[] = [];
    const onData = (buf: Buffer) => {
      for (const line of buf.toString().split('\n')) {
        if (!line) continue;
        lines++;
        tail.push(line);
        if (tail.length > 20) tail.shift();
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    const timer = setInterval(() => {
      const secs = Math.round((Date.now() - started) / 1000);
      progress(`[build ${spec.name} ${spec.version}] go ${args[0]}: ${lines} packages/lines so far, ${secs}s elapsed`);
    }, 15_000);
    child.on('error', (err) => {
      clearInterval(timer);
      reject(new SandboxError('cluster.build', `cannot run go: ${err.message}`, { cause: err }));
    });
    child.on('close', (code) => {
      clearInterval(timer);
      if (code === 0) resolve();
      else
        reject(
          new SandboxError(
            'cluster.build',
            `go ${args[0]} of ${spec.name} ${spec.version} failed (exit ${code}):\n${tail.join('\n')}`,
            {
              hint: 'fix the error above (often: the Go module proxy is unreachable, or the disk is full), then run again',
            },
          ),
        );
    });
  });
}

/**
 * Where each binary of a component is published upstream: a plain file, or a member of a release tarball (its
 * leading directories are stripped). Total over ComponentName, so a new component must say where it comes from.
 */
interface ReleaseAsset {
  url: string;
  /** The binary's path inside the tarball at `url`; absent when `url` is the binary itself. */
  member?: string;
}
const K8S_RELEASE = (v: string, bin: string): ReleaseAsset => ({
  url: `https://dl.k8s.io/release/${v}/bin/linux/amd64/${bin}`,
});
const RELEASE_ASSETS: Record<ComponentName, (v: string, bin: string) => ReleaseAsset> = {
  kubernetes: K8S_RELEASE,
  'kubernetes-node': K8S_RELEASE,
  kwok: (v, bin) => ({ url: `https://github.com/kubernetes-sigs/kwok/releases/download/${v}/${bin}-linux-amd64` }),
  etcd: (v) => ({
    url: `https://github.com/etcd-io/etcd/releases/download/${v}/etcd-${v}-linux-amd64.tar.gz`,
    member: `etcd-${v}-linux-amd64/etcd`,
  }),
  helm: (v) => ({ url: `https://get.helm.sh/helm-${v}-linux-amd64.tar.gz`, member: 'linux-amd64/helm' }),
  // The "static" tarball: the plain one is linked against the build host's glibc.
  containerd: (v, bin) => ({
    url: `https://github.com/containerd/containerd/releases/download/${v}/containerd-static-${v.slice(1)}-linux-amd64.tar.gz`,
    member: `bin/${bin}`,
  }),
  coredns: (v) => ({
    url: `https://github.com/coredns/coredns/releases/download/${v}/coredns_${v.slice(1)}_linux_amd64.tgz`,
    member: 'coredns',
  }),
};

async function download(spec: ComponentSpec, cacheDir: string, target: string, progress: (l: string) => void) {
  const dlDir = join(cacheDir, 'build', `${spec.name}-${spec.version}-download`);
  await mkdir(dlDir, { recursive: true });
  await installInto(target, async (tmp) => {
    // Several binaries may share one tarball (containerd): fetch each URL once.
    const fetched = new Map<string, string>();
    for (const bin of spec.binaries) {
      const { url, member } = RELEASE_ASSETS[spec.name](spec.version, bin);
      let file = fetched.get(url);
      if (!file) {
        progress(`[download ${spec.name} ${spec.version}] ${url}`);
        const res = await fetch(url);
        if (!res.ok || !res.body) throw new SandboxError('cluster.download', `GET ${url}: HTTP ${res.status}`);
        file = member ? join(dlDir, `${spec.name}-${fetched.size}.tar.gz`) : join(tmp, bin);
        await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), createWriteStream(file));
        fetched.set(url, file);
      }
      if (member) {
        const strip = member.split('/').length - 1;
        const untar = spawnSync('tar', ['-xzf', file, '-C', tmp, `--strip-components=${strip}`, member]);
        if (untar.status !== 0) throw new SandboxError('cluster.download', `cannot unpack ${file}: ${untar.stderr}`);
      }
      await chmod(join(tmp, bin), 0o755);
    }
    if (spec.name === 'kwok') {
      const docs = [];
      for (const f of KWOK_STAGE_FILES) {
        const res = await fetch(`https://raw.githubusercontent.com/kubernetes-sigs/kwok/${spec.version}/${f}`);
        if (!res.ok) throw new SandboxError('cluster.download', `kwok stage ${f}: HTTP ${res.status}`);
        docs.push((await res.text()).trim());
      }
      await writeFile(join(tmp, KWOK_STAGES_FILE), docs.join('\n---\n') + '\n');
    }
  });
}
