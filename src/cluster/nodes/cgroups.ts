import { existsSync } from 'node:fs';
import { readdir, readFile, mkdir, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A real node's cgroup subtree: `/sys/fs/cgroup/<hierarchy>/<root>` in every hierarchy this machine mounts.
 *
 * kubelet (cgroupRoot) puts every pod below it, and the node's own agents (the mount-namespace holder, and with it
 * containerd, kubelet, kube-proxy and every containerd shim they start) go into `<root>/agents`. So "everything this
 * node runs" is exactly the processes in that subtree: stopping a node kills them all, and nothing escapes into the
 * caller's cgroups. Works on cgroup v1 (one directory per hierarchy, as here) and v2 (one unified tree).
 */
const CGROUP_FS = '/sys/fs/cgroup';
export const AGENTS_CGROUP = 'agents';

/** The mounted hierarchies: on v1 one directory each (cpu, memory, ..., name=systemd), on v2 the root itself. */
async function hierarchies(): Promise<string[]> {
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  const dirs: string[] = [];
  for (const line of mounts.split('\n')) {
    const [, dir, type] = line.split(' ');
    if (!dir || !dir.startsWith(CGROUP_FS)) continue;
    if (type === 'cgroup' || type === 'cgroup2') dirs.push(dir);
  }
  return dirs;
}

/**
 * Create `<root>` (and `<root>/agents`) in every hierarchy. kubelet refuses to start until its cgroupRoot exists in
 * each v1 hierarchy, and a new cpuset cgroup has no CPUs or memory nodes until they are copied from its parent.
 */
export async function createNodeCgroups(root: string): Promise<void> {
  for (const h of await hierarchies()) {
    for (const rel of [root, join(root, AGENTS_CGROUP)]) {
      const dir = join(h, rel);
      await mkdir(dir, { recursive: true });
      if (h.endsWith('/cpuset')) {
        for (const f of ['cpuset.cpus', 'cpuset.mems']) {
          const parent = (await readFile(join(dir, '..', f), 'utf8')).trim();
          if ((await readFile(join(dir, f), 'utf8')).trim() === '') await writeFile(join(dir, f), parent);
        }
      }
    }
  }
}

/**
 * argv prefix that puts the command (and so everything it starts later: containerd's shims, kubelet's probes) into
 * `<root>/agents` in every hierarchy before it runs: a shell writes its own PID, then execs the command in place.
 */
export async function inAgentsCgroup(root: string): Promise<string[]> {
  const files = (await hierarchies()).map((h) => ({ file: join(h, root, AGENTS_CGROUP, 'cgroup.procs'), h }));
  // The unified v2 tree of a hybrid machine may refuse a process (controllers on in the subtree); only the v1
  // hierarchies matter there, for kubelet and for what a stop kills.
  const writes = files.map(({ file, h }) =>
    h.endsWith('/unified') ? `echo $$ > ${file} 2>/dev/null || true` : `echo $$ > ${file}`,
  );
  return ['sh', '-c', `set -e; ${writes.join('; ')}; exec "$@"`, 'sbx-node-agent'];
}

/** Every process in `<root>`'s subtree, read from one hierarchy that every process is in. */
export async function processesInSubtree(root: string): Promise<number[]> {
  const hs = await hierarchies();
  // pids (v1) or the v2 root hold every process; fall back to the first hierarchy.
  const h = hs.find((d) => d.endsWith('/pids')) ?? hs.find((d) => d === CGROUP_FS) ?? hs[0];
  if (!h) return [];
  const pids: number[] = [];
  const walk = async (dir: string): Promise<void> => {
    const procs = await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const l of procs.split('\n')) if (l.trim()) pids.push(Number(l));
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isDirectory()) await walk(join(dir, e.name));
  };
  await walk(join(h, root));
  return pids;
}

/**
 * SIGKILL everything still in the subtree (containers, shims, whatever outlived a graceful stop), until it is
 * empty, then remove the directories deepest first. Resolves with what was left, if anything could not be removed.
 */
export async function destroyNodeCgroups(root: string, timeoutMs = 15_000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pids = await processesInSubtree(root);
    if (pids.length === 0 || Date.now() > deadline) break;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // exited meanwhile
      }
    }
    await sleep(100);
  }
  const left: string[] = [];
  for (const h of await hierarchies()) {
    const top = join(h, root);
    if (!existsSync(top)) continue;
    const dirs: string[] = [];
    const walk = async (dir: string): Promise<void> => {
      dirs.push(dir);
      for (const e of await readdir(dir, { withFileTypes: true }).catch(() => []))
        if (e.isDirectory()) await walk(join(dir, e.name));
    };
    await walk(top);
    // Deepest first: a cgroup directory can only be removed once its children are gone.
    for (const dir of dirs.reverse()) {
      let removed = false;
      for (let attempt = 0; attempt < 20 && !removed; attempt++) {
        removed = await rmdir(dir).then(
          () => true,
          (err: NodeJS.ErrnoException) => err.code === 'ENOENT',
        );
        if (!removed) await sleep(50); // a killed process leaves its cgroup a moment after it is reaped
      }
      if (!removed) left.push(dir);
    }
  }
  return left;
}

/** The cgroup subtrees whose name starts with `prefix` (the leak check: `sbx-<k>-`). */
export async function cgroupsWithPrefix(prefix: string): Promise<string[]> {
  const out = new Set<string>();
  for (const h of await hierarchies()) {
    for (const e of await readdir(h, { withFileTypes: true }).catch(() => []))
      if (e.isDirectory() && e.name.startsWith(prefix)) out.add(e.name);
  }
  return [...out];
}

/**
 * Remove what the real nodes of cluster namespace `sbx-<k>` left (a supervisor killed before it could stop them):
 * every process in their cgroup subtrees, then the subtrees. Resolves with what could not be removed.
 */
export async function removeRealNodeCgroups(netns: string): Promise<string[]> {
  const left: string[] = [];
  for (const root of await cgroupsWithPrefix(`${netns}-`)) left.push(...(await destroyNodeCgroups(root)));
  return left;
}
