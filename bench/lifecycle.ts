/**
 * bench/lifecycle — each lifecycle verb through kube-apiserver (the sandboxes/{name}/<verb> subresources of
 * sandbox-apiserver) beside the same operation on sandboxd directly, in one run, on real microVMs
 * (template sandbox/minimal, 2 sandboxd nodes):
 *
 *   node --import tsx bench/lifecycle.ts [--samples 15]
 *
 * pause, resume, fork (count 1 and 4), snapshot, create-from-snapshot; the aggregator floor (GET of our discovery
 * document through kube-apiserver); resume-to-first-exec beside a warm exec. Targets (issue "lifecycle verbs"):
 * through the API ≤ 1.5× direct + the floor; resume-to-first-exec p50 ≤ 3× a warm exec.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { readClusterEnvironment } from '../src/cluster/index.js';
import { startPlatform } from '../src/cli/platform.js';
import { KubeClient, Namespaces, objectPath, Sandboxes } from '../src/kube/index.js';
import { createLogger } from '../src/log/logger.js';
import { percentile } from './claim-driver.js';

const { values } = parseArgs({ options: { samples: { type: 'string', default: '15' } } });
const N = Number(values.samples);
const say = (s: string) => process.stderr.write(`[bench/lifecycle] ${s}\n`);
const p = (xs: number[], q: number) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    q,
  );

async function main(): Promise<void> {
  const env = readClusterEnvironment();
  const agg = await startPlatform({
    cacheDir: env.cacheDir,
    binDir: env.binDir,
    dataDir: `/tmp/sbx-bench-lifecycle-${process.pid}`,
    layout: 'aggregated',
    simulatedNodes: 0,
    sandboxdNodes: 2,
    warm: 12,
    template: 'sandbox/minimal',
    etcdFsync: true,
    logger: createLogger({ level: 'warn', name: 'bench' }),
    progress: say,
  });
  try {
    const a = await KubeClient.fromKubeconfig(agg.cluster.kubeconfigPath, { qps: -1 });
    await a.create(Namespaces, { metadata: { name: 'bench' } });
    const token = (await readFile(agg.sandboxd[0]!.tokenFile, 'utf8')).trim();
    const nodeAddr = new Map(agg.sandboxd.map((n) => [n.node, n.address]));
    const direct = async (node: string, method: string, path: string, body?: unknown) => {
      const res = await fetch(`http://${nodeAddr.get(node)}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
      return res.status === 204 ? undefined : ((await res.json()) as Record<string, unknown>);
    };
    const api = (name: string, sub: string, kind: string, fields: Record<string, unknown> = {}) =>
      a.raw('POST', objectPath(Sandboxes, 'bench', name, sub), {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind,
        ...fields,
      });
    let seq = 0;
    const make = async (annotations?: Record<string, string>) => {
      const name = `lc-${seq++}`;
      const obj = (await a.create(Sandboxes, {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: { name, namespace: 'bench', ...(annotations ? { annotations } : {}) },
        spec: { podTemplate: { spec: { containers: [{ name: 'main', image: 'sandbox/minimal' }] } } },
      } as never)) as { metadata: { annotations: Record<string, string> }; status: { nodeName: string } };
      return { name, id: obj.metadata.annotations['sandbox.cocoonstack.io/claim-id']!, node: obj.status.nodeName };
    };
    const time = async (f: () => Promise<unknown>) => {
      const t0 = performance.now();
      await f();
      return performance.now() - t0;
    };
    const s = await make();
    const sb = `/v1/sandboxes/${s.id}`;
    const r: Record<string, { api: number[]; direct: number[] }> = {};
    const add = (k: string, side: 'api' | 'direct', ms: number) => (r[k] ??= { api: [], direct: [] })[side].push(ms);
    const floor: number[] = [];
    const resumeToExec: number[] = [];
    const warmExec: number[] = [];
    for (let i = 0; i < 10; i++) await a.raw('GET', '/apis/agents.x-k8s.io/v1beta1');
    for (let i = 0; i < N; i++) {
      say(`round ${i + 1}/${N}`);
      floor.push(await time(() => a.raw('GET', '/apis/agents.x-k8s.io/v1beta1')));
      add('pause', 'api', await time(() => api(s.name, 'pause', 'SandboxPauseOptions')));
      add('resume', 'api', await time(() => api(s.name, 'resume', 'SandboxResumeOptions')));
      add('pause', 'direct', await time(() => direct(s.node, 'POST', `${sb}/pause`)));
      add('resume', 'direct', await time(() => direct(s.node, 'POST', `${sb}/resume`)));
      warmExec.push(await time(() => direct(s.node, 'POST', `${sb}/exec`, { argv: ['true'] })));
      await api(s.name, 'pause', 'SandboxPauseOptions');
      resumeToExec.push(
        await time(async () => {
          await api(s.name, 'resume', 'SandboxResumeOptions');
          await direct(s.node, 'POST', `${sb}/exec`, { argv: ['true'] });
        }),
      );
      for (const count of [1, 4]) {
        let kids: Array<{ id: string }> = [];
        let apiKids: Array<{ name: string }> = [];
        add(
          `fork ${count}`,
          'api',
          await time(async () => {
            apiKids = (
              JSON.parse(await api(s.name, 'fork', 'SandboxForkOptions', { count })) as {
                children: Array<{ name: string }>;
              }
            ).children;
          }),
        );
        for (const c of apiKids) await a.delete(Sandboxes, 'bench', c.name);
        add(
          `fork ${count}`,
          'direct',
          await time(async () => {
            kids = ((await direct(s.node, 'POST', `${sb}/fork`, { count })) as { children: Array<{ id: string }> })
              .children;
          }),
        );
        for (const k of kids) await direct(s.node, 'POST', `/v1/sandboxes/${k.id}/release`);
      }
      let snapApi = '';
      let snapDirect = '';
      add(
        'snapshot',
        'api',
        await time(async () => {
          snapApi = (JSON.parse(await api(s.name, 'snapshot', 'SandboxSnapshotOptions')) as { snapshotID: string })
            .snapshotID;
        }),
      );
      add(
        'snapshot',
        'direct',
        await time(async () => {
          snapDirect = ((await direct(s.node, 'POST', `${sb}/checkpoint`, {})) as { checkpoint: { id: string } })
            .checkpoint.id;
        }),
      );
      let restored = { name: '', id: '', node: '' };
      add(
        'create from snapshot',
        'api',
        await time(async () => {
          restored = await make({ 'sandbox.cocoonstack.io/snapshot': snapApi });
        }),
      );
      await a.delete(Sandboxes, 'bench', restored.name);
      let directId = '';
      add(
        'create from snapshot',
        'direct',
        await time(async () => {
          directId = ((await direct(s.node, 'POST', `/v1/checkpoints/${snapDirect}/claim`, {})) as { id: string }).id;
        }),
      );
      await direct(s.node, 'POST', `/v1/sandboxes/${directId}/release`);
      for (const ck of [snapApi, snapDirect]) await direct(s.node, 'DELETE', `/v1/checkpoints/${ck}`);
    }
    const f50 = p(floor, 50);
    const lines = [
      '',
      `bench/lifecycle — ${new Date().toISOString()}, ${N} samples per operation, etcd fsync on`,
      `aggregator floor (GET discovery via kube-apiserver): p50 ${f50.toFixed(2)} ms, p95 ${p(floor, 95).toFixed(2)} ms`,
      'operation               API p50 / p95 ms      direct p50 / p95 ms   API p50 / (1.5 x direct p50 + floor)',
    ];
    for (const [k, v] of Object.entries(r)) {
      const bound = 1.5 * p(v.direct, 50) + f50;
      lines.push(
        `${k.padEnd(22)}  ${p(v.api, 50).toFixed(1).padStart(7)} / ${p(v.api, 95).toFixed(1).padEnd(9)}  ${p(v.direct, 50).toFixed(1).padStart(7)} / ${p(v.direct, 95).toFixed(1).padEnd(9)}  ${(p(v.api, 50) / bound).toFixed(2)}x ${p(v.api, 50) <= bound ? 'pass' : 'miss'}`,
      );
    }
    const rte = p(resumeToExec, 50);
    const we = p(warmExec, 50);
    lines.push(
      `resume -> first exec p50 ${rte.toFixed(1)} ms; warm exec p50 ${we.toFixed(1)} ms; ratio ${(rte / we).toFixed(2)}x (target 3x) ${rte <= 3 * we ? 'pass' : 'miss'}`,
    );
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await agg.stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench/lifecycle failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
