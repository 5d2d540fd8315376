/**
 * Which Pods ask for upstream sandboxd (upstream agent-sandbox's in-pod daemon) and what the guest is asked to start
 * (docs/runtime-adapter.md "How upstream's SDKs reach a microVM").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { upstreamSandboxdFor } from '../../src/sandboxd/vk/upstream-sandboxd.js';
import type { Container, Pod } from '../../src/sandboxd/vk/types.js';

const pod = (containers: Container[], extra: Partial<Pod['spec']> = {}): Pod => ({
  metadata: { name: 'p', namespace: 'ns', uid: 'u-1' },
  spec: { nodeName: 'n-vk', containers, ...extra },
});
const ports = (...ps: Array<number | [number, string]>) =>
  ps.map((p) => (Array.isArray(p) ? { containerPort: p[0], protocol: p[1] } : { containerPort: p }));

describe('upstream sandboxd: which pods ask for it', () => {
  it('a container declaring both 8080 and 9090 (TCP) does', () => {
    const spec = upstreamSandboxdFor(pod([{ name: 'a' }, { name: 'sandboxd', ports: ports(9090, [8080, 'TCP']) }]));
    assert.deepEqual(spec, { path: '/workspace', host: '0.0.0.0', restPort: 8080, grpcPort: 9090, env: {} });
  });

  const no: Array<[string, Container[]]> = [
    ['no ports', [{ name: 'main' }]],
    ['only 8080 (a tenant web server)', [{ name: 'main', ports: ports(8080) }]],
    [
      'the two ports on different containers',
      [
        { name: 'a', ports: ports(8080) },
        { name: 'b', ports: ports(9090) },
      ],
    ],
    ['UDP', [{ name: 'main', ports: ports([8080, 'UDP'], 9090) }]],
  ];
  for (const [name, containers] of no)
    it(`${name}: does not`, () => assert.equal(upstreamSandboxdFor(pod(containers)), undefined));

  it("env (literals and known fieldRefs) and the container's user, else the pod's", () => {
    const spec = upstreamSandboxdFor(
      pod(
        [
          {
            name: 'sandboxd',
            ports: ports(8080, 9090),
            env: [
              { name: 'SANDBOX_A', value: 'x' },
              { name: 'SANDBOX_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'SANDBOX_NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              { name: 'SANDBOX_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
            ],
            securityContext: { runAsUser: 1000 },
          },
        ],
        { securityContext: { runAsUser: 5, runAsGroup: 7 } },
      ),
    );
    assert.deepEqual(spec?.env, { SANDBOX_A: 'x', SANDBOX_NAME: 'p', SANDBOX_NS: 'ns' });
    assert.equal(spec?.uid, 1000);
    assert.equal(spec?.gid, 7);
  });
});
