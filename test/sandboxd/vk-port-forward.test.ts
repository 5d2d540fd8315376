/**
 * Port-forward over the WebSocket channel protocol (docs/virtual-kubelet.md "port-forward: the WebSocket channel
 * protocol") into a real microVM: @kubernetes/client-node's PortForward (the transport of the sandboxd TS SDK)
 * through the real kube-apiserver to a vk-cocoon Pod, and the kubelet API dialled directly to see the frames.
 * The guest runs busybox `nc` servers: an echo on 8080 and one that greets and closes on 8081.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import type { WebSocket } from 'ws';
import { KubeClient, Pods } from '../../src/kube/index.js';
import type { NodeEngine } from '../../src/sandboxd/engine.js';
import type { Pod } from '../../src/sandboxd/vk/types.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import { dialChannels } from '../support/port-forward-channel.js';
import { startTestVirtualNode, type TestVirtualNode } from '../support/virtual-node.js';
import { BUILD_TIMEOUT_MS } from '../vm/helpers.js';

const ECHO = 8080;
const BYE = 8081;
const CLOSED = 8099;

/** Collects what a stream receives. */
function sink(): { stream: PassThrough; text: () => string; bytes: () => Buffer } {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  return { stream, text: () => Buffer.concat(chunks).toString(), bytes: () => Buffer.concat(chunks) };
}

const wsClosed = (ws: WebSocket) =>
  new Promise<number>((resolve) => {
    if (ws.readyState === ws.CLOSED) resolve(ws.readyState);
    else ws.once('close', (code: number) => resolve(code));
  });

describe(
  'port-forward: the WebSocket channel protocol into a microVM',
  { timeout: BUILD_TIMEOUT_MS + 5 * 60_000 },
  () => {
    let cluster: TestCluster;
    let ns: Awaited<ReturnType<typeof createTestNamespace>>;
    let client: KubeClient;
    let node: TestVirtualNode | undefined;
    let engine: NodeEngine;
    let vkNode: string;
    let kubeletPort: number;
    let uid: string;
    const kc = new k8s.KubeConfig();

    before(
      async () => {
        cluster = await getTestCluster();
        ns = await createTestNamespace('vkpf');
        client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { qps: -1 });
        kc.loadFromFile(cluster.kubeconfigPath);
        node = await startTestVirtualNode({ cluster, client, base: `vkpf-${process.pid}`, podResyncMs: 2000 });
        engine = node.engine;
        const vk = node.vk.nodes.find((n) => n.kind === 'vk-cocoon')!;
        vkNode = vk.name;
        kubeletPort = vk.port;
        await client.create(Pods, {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'pf', namespace: ns.name },
          spec: {
            nodeName: vkNode,
            containers: [{ name: 'main', image: 'sandbox/minimal:latest' }],
            tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
          },
        } satisfies Pod);
        const pod = await eventually(() => client.get<Pod>(Pods, ns.name, 'pf'), {
          timeoutMs: 90_000,
          until: (p) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True',
          what: 'pod pf Ready',
        });
        uid = pod.metadata.uid!;
        const vm = engine.vm(engine.byRef(`${ns.name}/pf`)!.id);
        await vm.run(['sh', '-c', `printf '#!/bin/sh\\necho bye-from-guest\\n' > /tmp/bye; chmod +x /tmp/bye`]);
        // -ll: keep listening, one child per connection (busybox nc).
        vm.exec(['nc', '-ll', '-p', String(ECHO), '-e', 'cat'], { collect: false });
        vm.exec(['nc', '-ll', '-p', String(BYE), '-e', '/tmp/bye'], { collect: false });
        const listening = (port: number) => new RegExp(`:${port.toString(16).toUpperCase()} [0-9A-F]+:0000 0A `);
        await eventually(() => vm.run(['cat', '/proc/net/tcp', '/proc/net/tcp6']).then((r) => r.stdout.toString()), {
          until: (o) => listening(ECHO).test(o) && listening(BYE).test(o),
          what: 'the guest servers listening',
        });
      },
      { timeout: BUILD_TIMEOUT_MS + 2 * 60_000 },
    );

    after(async () => {
      await node?.stop();
      client?.close();
      await ns?.cleanup();
    });

    it('client-node PortForward through kube-apiserver moves bytes both ways (v4.channel.k8s.io)', async () => {
      const out = sink();
      const err = sink();
      const input = new PassThrough();
      const pf = new k8s.PortForward(kc);
      const ws = (await pf.portForward(ns.name, 'pf', [ECHO], out.stream, err.stream, input)) as WebSocket;
      try {
        assert.equal(ws.protocol, 'v4.channel.k8s.io');
        const payload = randomBytes(256 << 10);
        for (let i = 0; i < payload.length; i += 16 << 10) input.write(payload.subarray(i, i + (16 << 10)));
        await eventually(() => out.bytes().length, {
          timeoutMs: 60_000,
          until: (n) => n >= payload.length,
          what: `the echo of ${payload.length} bytes (err: ${err.text()})`,
        });
        assert.ok(out.bytes().equals(payload), 'the guest echoed every byte, in order');
        assert.equal(err.text(), '');
      } finally {
        input.end(); // client-node closes the WebSocket at the end of its input
      }
      await wsClosed(ws);
    });

    it('through kube-apiserver: a guest that closes ends the WebSocket; a refused port comes back on the error channel', async () => {
      const out = sink();
      const ws = (await new k8s.PortForward(kc).portForward(
        ns.name,
        'pf',
        [BYE],
        out.stream,
        null,
        new PassThrough(),
      )) as WebSocket;
      assert.equal(await wsClosed(ws), 1000);
      assert.equal(out.text(), 'bye-from-guest\n');

      const out2 = sink();
      const err = sink();
      const ws2 = (await new k8s.PortForward(kc).portForward(
        ns.name,
        'pf',
        [CLOSED],
        out2.stream,
        err.stream,
        new PassThrough(),
      )) as WebSocket;
      assert.equal(await wsClosed(ws2), 1000);
      assert.match(err.text(), new RegExp(`^error forwarding port ${CLOSED} to pod pf, uid ${uid}: `));
      assert.equal(out2.text(), '');
    });

    const direct = (query: string, protocols: string[]) =>
      dialChannels({
        host: cluster.hostAddress,
        port: kubeletPort,
        path: `/portForward/${ns.name}/pf${query}`,
        protocols,
        ca: cluster.pki.ca.cert,
        cert: cluster.pki.apiserverKubeletClient.cert,
        key: cluster.pki.apiserverKubeletClient.key,
      });

    it('the kubelet API: port prefixes first, two ports on one WebSocket, stray frames dropped', async () => {
      const c = await direct(`?port=${ECHO},${BYE}`, ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'channel.k8s.io']);
      assert.equal(c.protocol, 'v4.channel.k8s.io');
      await eventually(() => c.frames.length, { until: (n) => n >= 4, what: 'the four port frames' });
      const le = (p: number) => Buffer.from([p & 0xff, p >> 8]);
      assert.deepEqual(
        c.frames.slice(0, 4).map((f) => [f.channel, [...f.data]]),
        [
          [0, [...le(ECHO)]],
          [1, [...le(ECHO)]],
          [2, [...le(BYE)]],
          [3, [...le(BYE)]],
        ],
      );
      c.send(1, 'to the error channel'); // write-only: dropped
      c.send(9, 'to no channel'); // past the last: dropped
      c.ws.send(Buffer.alloc(0)); // empty: skipped
      c.send(0, 'ping-0\n');
      await eventually(() => c.channel(0).toString(), {
        until: (s) => s === 'ping-0\n',
        what: 'the echo on channel 0',
      });
      await eventually(() => c.channel(2).toString(), {
        until: (s) => s === 'bye-from-guest\n',
        what: 'the greeting on channel 2',
      });
      assert.equal(c.channel(1).length + c.channel(3).length, 0, 'no errors');
      c.ws.close();
      assert.equal((await c.closed).code, 1005);
    });

    it('the kubelet API: base64 text frames, and no subprotocol at all (binary)', async () => {
      const b = await direct(`?port=${ECHO}`, ['v4.base64.channel.k8s.io']);
      assert.equal(b.protocol, 'v4.base64.channel.k8s.io');
      b.send(0, Buffer.from([0, 1, 2, 255, 254]));
      await eventually(() => [...b.channel(0)], {
        until: (v) => v.length === 5,
        what: 'the base64 echo',
      });
      assert.deepEqual([...b.channel(0)], [0, 1, 2, 255, 254]);
      b.ws.close();
      const n = await direct(`?port=${ECHO}`, []);
      assert.equal(n.protocol, '');
      n.send(0, 'plain\n');
      await eventually(() => n.channel(0).toString(), { until: (s) => s === 'plain\n', what: 'the binary echo' });
      n.ws.close();
    });

    it('the kubelet API refuses what the kubelet refuses, with a Status', async () => {
      const refused = async (query: string, protocols: string[], message: RegExp) => {
        const err = (await direct(query, protocols).then(
          () => assert.fail(`upgrade ${query} ${protocols.join(',')} was accepted`),
          (e: Error) => e,
        )) as Error & { status?: number };
        assert.equal(err.status, 400, err.message);
        assert.match(err.message, /"kind":"Status"/);
        assert.match(err.message, message);
      };
      await refused('', ['v4.channel.k8s.io'], /query parameter \\"port\\" is required/);
      await refused('?port=0', ['v4.channel.k8s.io'], /must be > 0/);
      await refused('?port=65536', ['v4.channel.k8s.io'], /unable to parse/);
      await refused(`?port=${ECHO}`, ['channel.k8s.io'], /supported: SPDY\/3\.1\+portforward\.k8s\.io, v4\.channel/);
    });
  },
);
