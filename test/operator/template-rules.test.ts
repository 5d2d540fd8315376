/** Unit test (no cluster) of the template's NetworkPolicy (spec §7). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fnv1a32, LabelKeys } from '../../src/api/index.js';
import { desiredNetworkPolicySpec } from '../../src/operator/extensions/template-controller.js';
import type { TemplateObj } from '../../src/operator/extensions/support.js';

const tpl = (networkPolicy?: TemplateObj['spec']['networkPolicy']): TemplateObj => ({
  metadata: { name: 'tpl', namespace: 'ns' },
  spec: { podTemplate: { spec: { containers: [] } }, ...(networkPolicy ? { networkPolicy } : {}) },
});

describe('template NetworkPolicy', () => {
  it('secure default: router ingress only, public egress only', () => {
    const spec = desiredNetworkPolicySpec(tpl(), 'sandbox-system');
    assert.deepEqual(spec.podSelector, { matchLabels: { [LabelKeys.sandboxTemplateRefHash]: fnv1a32('tpl') } });
    assert.deepEqual(spec.policyTypes, ['Ingress', 'Egress']);
    assert.deepEqual(spec.ingress, [
      {
        from: [
          {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'sandbox-system' } },
            podSelector: { matchLabels: { app: 'sandbox-router' } },
          },
        ],
      },
    ]);
    const egress = spec.egress as Array<{ to: Array<{ ipBlock: { cidr: string; except: string[] } }> }>;
    assert.deepEqual(
      egress[0]!.to.map((p) => p.ipBlock.cidr),
      ['0.0.0.0/0', '::/0'],
    );
    assert.ok(egress[0]!.to[0]!.ipBlock.except.includes('169.254.0.0/16'));
  });
  it('user rules verbatim', () => {
    const spec = desiredNetworkPolicySpec(tpl({ ingress: [], egress: [{ ports: [{ port: 443 }] }] }), 'r');
    assert.deepEqual(spec.ingress, []);
    assert.deepEqual(spec.egress, [{ ports: [{ port: 443 }] }]);
  });
});
