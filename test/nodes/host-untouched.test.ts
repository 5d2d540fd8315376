/**
 * Real nodes change nothing on this machine (issue 29 item 1): a private control plane with one real node (kubelet,
 * containerd, the CNI bridge, kube-proxy, CoreDNS) runs a Pod with a hostPort behind a NodePort Service, and the
 * machine's own network namespace keeps its iptables / ip6tables / nftables rules, links, routes and the sysctls
 * kubelet wants, before, while the node runs and after it stopped; after the stop no cgroup, process or mount of
 * the node is left.
 *
 * Other test files run at the same time and make namespaces, VM veths and nft tables of their own, so only what
 * real nodes would add is compared (KUBE-/CNI- chains, the pod CIDR, `sbx_pods`, `cni*` bridges and pod veths),
 * and the leftovers are looked for by what is this cluster's own (its namespace name and its data directory).
 * The same rules are checked INSIDE the cluster's namespace while the node runs, so the comparison is not vacuous.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { listProcesses, readClusterEnvironment, startCluster } from '../../src/cluster/index.js';
import { BUSYBOX_TEST_IMAGE as BUSYBOX } from '../../src/cluster/node-images.js';
import { eventually } from '../support/eventually.js';

const run = promisify(execFile);
const NODE = 'worker-0';
const POD_NET = /^10\.85\./;
/** Every sysctl kubelet checks or sets (setupKernelTunables), and those a node's networking could touch. */
const SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
  'net/ipv4/ip_forward',
  'net/ipv4/conf/all/forwarding',
  'net/bridge/bridge-nf-call-iptables',
  'net/netfilter/nf_conntrack_max',
  'net/netfilter/nf_conntrack_tcp_timeout_established',
  'net/netfilter/nf_conntrack_tcp_timeout_close_wait',
];

/** What real nodes would add to a network namespace's rules: kube-proxy's, the CNI plugins' and our own. */
const NODE_RULE = /KUBE|CNI|cni|10\.85\.|sbx_pods|kube-proxy/;

/** stdout of a command, or `<missing: reason>` where the tool or table is absent (compared like any value). */
async function out(cmd: string, args: string[]): Promise<string> {
  return run(cmd, args, { maxBuffer: 64 << 20, timeout: 30_000 }).then(
    (r) => r.stdout,
    (err: { stderr?: string; message: string }) => `<missing: ${(err.stderr ?? err.message).trim()}>`,
  );
}

/** The lines of `text` that mention what real nodes add, packet counters removed (they change by themselves). */
const nodeLines = (text: string) =>
  text
    .split('\n')
    .filter((l) => NODE_RULE.test(l))
    .map((l) => l.replace(/\[\d+:\d+\]/g, '').replace(/counter packets \d+ bytes \d+/g, 'counter'));

/** The machine's state that real nodes must not change, `prefix` being ['nsenter', '--net=...'] for a namespace. */
async function snapshot(prefix: string[] = []) {
  const x = (cmd: string, args: string[]) =>
    prefix.length ? out(prefix[0]!, [...prefix.slice(1), cmd, ...args]) : out(cmd, args);
  const sysctls: Record<string, string> = {};
  for (const key of SYSCTLS)
    sysctls[key] = await readFile(`/proc/sys/${key}`, 'utf8').then(
      (s) => s.trim(),
      () => '<absent>',
    );
  const links = (await x('ip', ['-o', 'link']))
    .split('\n')
    .map((l) => /^\d+: ([^:@]+)/.exec(l)?.[1])
    // The CNI bridge (`cni<k>`) and pod veths (`veth<hex>`; VM uplinks are `sbxv*`, cluster links `sbx<k>h`).
    .filter((n): n is string => !!n && /^(cni\d*|veth[0-9a-f]+)$/.test(n));
  const routes = [...(await x('ip', ['route'])).split('\n'), ...(await x('ip', ['-6', 'route'])).split('\n')].filter(
    (l) => POD_NET.test(l) || /cni/.test(l),
  );
  return {
    iptables: nodeLines(await x('iptables-save', [])),
    ip6tables: nodeLines(await x('ip6tables-save', [])),
    nft: nodeLines(await x('nft', ['list', 'ruleset'])),
    links,
    routes,
    sysctls,
  };
}

/** A Pod serving on 8080 (with hostPort 18080: the CNI portmap plugin's rules) behind a NodePort Service. */
const manifests = (ns: string) =>
  JSON.stringify({
    apiVersion: 'v1',
    kind: 'List',
    items: [
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'web', namespace: ns, labels: { app: 'web' } },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [
            {
              name: 'main',
              image: BUSYBOX,
              command: [
                'sh',
                '-c',
                'mkdir -p /www && echo host-untouched > /www/index.html && exec httpd -f -p 8080 -h /www',
              ],
              ports: [{ containerPort: 8080, hostPort: 18080 }],
              readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
            },
          ],
        },
      },
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'web', namespace: ns },
        spec: { type: 'NodePort', selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    ],
  });

/** An HTTP GET from inside the cluster's namespace (busybox nc: the machine's own routes never see it). */
async function getInNamespace(netns: string, ip: string, port: number): Promise<string> {
  const child = run('nsenter', [`--net=/run/netns/${netns}`, 'busybox', 'nc', '-w', '5', ip, String(port)], {
    timeout: 20_000,
  });
  // nc may exit before reading (connection refused while the rules are written): the rejection says why.
  child.child.stdin?.on('error', () => {});
  child.child.stdin?.end('GET /index.html HTTP/1.0\r\n\r\n');
  return (await child).stdout;
}

describe('real nodes leave the machine untouched', () => {
  it("a private cluster with a real node changes none of the host's rules, links, routes or sysctls", async () => {
    const env = readClusterEnvironment();
    const before = await snapshot();
    const cluster = await startCluster({
      cacheDir: env.cacheDir,
      binDir: env.binDir,
      simulatedNodes: 0,
      realNodes: 1,
      progress: (l) => process.stderr.write(`[host-untouched] ${l}\n`),
    });
    const { netns, dataDir } = cluster;
    assert.match(netns, /^sbx-\d+$/);
    const inNs = ['nsenter', `--net=/run/netns/${netns}`];
    try {
      assert.deepEqual(cluster.realNodes, [NODE]);
      await cluster.kubectl(['create', 'namespace', 'untouched']);
      // The namespace's default ServiceAccount comes a moment after the namespace (the Pod's admission needs it).
      await eventually(() => cluster.kubectl(['-n', 'untouched', 'get', 'serviceaccount', 'default']), {
        what: 'the default ServiceAccount',
        timeoutMs: 60_000,
        intervalMs: 250,
      });
      await cluster.kubectl(['apply', '-f', '-'], manifests('untouched'));
      await eventually(
        () =>
          cluster.kubectl([
            '-n',
            'untouched',
            'get',
            'pod',
            'web',
            '-o',
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
          ]),
        { until: (s) => s === 'True', what: 'the Pod Ready on the real node', timeoutMs: 120_000, intervalMs: 500 },
      );
      const svc = JSON.parse(await cluster.kubectl(['-n', 'untouched', 'get', 'service', 'web', '-o', 'json'])) as {
        spec: { clusterIP: string; ports: Array<{ nodePort: number }> };
      };
      const podIp = await cluster.kubectl(['-n', 'untouched', 'get', 'pod', 'web', '-o', 'jsonpath={.status.podIP}']);
      assert.match(podIp, POD_NET);
      // Each path answers from the namespace: Pod IP (the bridge), NodePort (kube-proxy), hostPort (CNI portmap).
      for (const [ip, port] of [
        [podIp, 8080],
        [cluster.apiAddress, svc.spec.ports[0]!.nodePort],
        [cluster.apiAddress, 18080],
      ] as const)
        await eventually(() => getInNamespace(netns, ip, port), {
          until: (o) => o.includes('host-untouched'),
          what: `http://${ip}:${port} from inside ${netns}`,
          timeoutMs: 60_000,
          intervalMs: 500,
        });
      // The ClusterIP from a Pod (the namespace itself has no route to the Service CIDR; Pods route through the
      // bridge), here the serving Pod itself: kube-proxy's hairpin.
      await eventually(
        () =>
          cluster.kubectl(
            ['-n', 'untouched', 'exec', '-i', 'web', '--', 'nc', '-w', '5', svc.spec.clusterIP, '80'],
            'GET /index.html HTTP/1.0\r\n\r\n',
          ),
        {
          until: (o) => o.includes('host-untouched'),
          what: `http://${svc.spec.clusterIP}:80 from the Pod`,
          timeoutMs: 60_000,
          intervalMs: 500,
        },
      );

      // The node's rules, bridge and routes exist, in the cluster's namespace.
      const inside = await snapshot(inNs);
      assert.ok(
        inside.iptables.some((l) => l.includes('KUBE-SERVICES')),
        'kube-proxy rules in the namespace',
      );
      assert.ok(
        inside.iptables.some((l) => /CNI-HOSTPORT|CNI-DN/.test(l)),
        'portmap rules in the namespace',
      );
      assert.ok(
        inside.nft.some((l) => l.includes('sbx_pods')),
        'the pod masquerade table in the namespace',
      );
      assert.ok(
        inside.links.some((l) => l.startsWith('cni')),
        'the CNI bridge in the namespace',
      );
      assert.ok(
        inside.links.some((l) => l.startsWith('veth')),
        "the Pod's veth in the namespace",
      );
      assert.ok(
        inside.routes.some((l) => POD_NET.test(l)),
        'the pod route in the namespace',
      );
      // kubelet's wanted sysctls are shadowed in the node's own mount namespace only.
      const holder = cluster.processes().find((p) => p.name === `${NODE}-holder`);
      assert.ok(holder, 'the node has its mount-namespace holder');
      const seen = await out('nsenter', ['-t', String(holder.pid), '--mount', 'cat', '/proc/sys/vm/overcommit_memory']);
      assert.equal(seen.trim(), '1', 'kubelet reads the value it wants in its mount namespace');

      assert.deepEqual(await snapshot(), before, 'the machine while the node runs');
    } finally {
      await cluster.stop();
    }
    assert.deepEqual(await snapshot(), before, 'the machine after the cluster stopped');

    // Nothing of the node is left: its cgroups (`<netns>-<node>` in every hierarchy), processes, mounts.
    const cgroupLeft: string[] = [];
    for (const h of await readdir('/sys/fs/cgroup'))
      for (const e of await readdir(`/sys/fs/cgroup/${h}`).catch(() => []))
        if (e.startsWith(`${netns}-`)) cgroupLeft.push(`/sys/fs/cgroup/${h}/${e}`);
    assert.deepEqual(cgroupLeft, []);
    const procs = (await listProcesses()).filter((p) => p.cmd.includes(dataDir));
    assert.deepEqual(procs, [], 'no process of the cluster left');
    const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(dataDir));
    assert.deepEqual(mounts, [], 'no mount under the data directory left');
    assert.equal(await out('ip', ['netns', 'pids', netns]).then((s) => s.startsWith('<missing')), true);
  });
});
