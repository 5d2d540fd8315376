/**
 * The NetworkPolicies that select a microVM pod, as its VM's template layer (src/sandboxd/vk/pod-network-policy.ts):
 * Kubernetes' selection (podSelector with matchLabels and matchExpressions, the policy's namespace, policyTypes and
 * their defaulting) and the union of the selecting policies' egress rules; no selecting policy = no template layer
 * (the secure default). The same for Ingress: the policies selecting the pod for Ingress (absent policyTypes: always)
 * give the ingress layer from their rules' `from` ipBlocks and ports; none = no ingress layer. Pure functions, no
 * cluster.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { networkPolicyIngressLayer } from '../../src/api/vm-network.js';
import { labelSelectorFromObject } from '../../src/apiserver/selectors.js';
import { desiredNetworkPolicySpec } from '../../src/operator/extensions/template-controller.js';
import {
  podEgressLayer,
  podIngressLayer,
  selectsEgressOf,
  selectsIngressOf,
  type NetworkPolicy,
} from '../../src/sandboxd/vk/pod-network-policy.js';

const POD = { metadata: { namespace: 'team', labels: { app: 'agent', tier: 'sandbox' } } };

function np(name: string, spec: NetworkPolicy['spec'], namespace = 'team'): NetworkPolicy {
  return { metadata: { name, namespace }, spec };
}

const HTTPS = np('https', {
  podSelector: { matchLabels: { app: 'agent' } },
  policyTypes: ['Egress'],
  egress: [{ to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] } }], ports: [{ port: 443 }] }],
});
const DNS = np('dns', {
  podSelector: {},
  policyTypes: ['Ingress', 'Egress'],
  egress: [{ to: [{ ipBlock: { cidr: '10.96.0.10/32' } }], ports: [{ protocol: 'UDP', port: 53 }] }],
});

describe('podEgressLayer', () => {
  it('no policy: no template layer (the secure default applies)', () => {
    assert.deepEqual(podEgressLayer(POD, []), { layer: undefined, policies: [], dropped: 0 });
  });

  it('two selecting policies: one layer of the union of their rules, in name order, deny otherwise', () => {
    const { layer, policies, dropped } = podEgressLayer(POD, [HTTPS, DNS]);
    assert.deepEqual(policies, ['team/dns', 'team/https']);
    assert.equal(dropped, 0);
    assert.deepEqual(layer, {
      source: 'NetworkPolicy team/dns, team/https',
      rules: [
        { action: 'allow', to: ['10.96.0.10/32'], ports: [{ protocol: 'udp', port: 53 }] },
        { action: 'allow', to: ['0.0.0.0/0'], except: ['10.0.0.0/8'], ports: [{ protocol: 'tcp', port: 443 }] },
      ],
      otherwise: 'deny',
    });
    // the same set in another order gives the same layer (a re-apply compares layers)
    assert.deepEqual(podEgressLayer(POD, [DNS, HTTPS]).layer, layer);
  });

  it('a selecting Egress policy without rules denies all egress (Kubernetes: selected, nothing allowed)', () => {
    const deny = np('deny-all', { podSelector: {}, policyTypes: ['Egress'] });
    assert.deepEqual(podEgressLayer(POD, [deny]).layer, {
      source: 'NetworkPolicy team/deny-all',
      rules: [],
      otherwise: 'deny',
    });
  });

  it('policies that do not select the pod give nothing', () => {
    const others = [
      np('other-app', { ...HTTPS.spec, podSelector: { matchLabels: { app: 'web' } } }),
      np('other-ns', HTTPS.spec, 'elsewhere'),
      np('ingress-only', { ...HTTPS.spec, policyTypes: ['Ingress'] }),
      np('expr-notin', {
        ...HTTPS.spec,
        podSelector: { matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['sandbox'] }] },
      }),
      np('expr-absent', {
        ...HTTPS.spec,
        podSelector: { matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] },
      }),
      np('labels-and-expr', {
        ...HTTPS.spec,
        podSelector: { matchLabels: { app: 'agent' }, matchExpressions: [{ key: 'gpu', operator: 'Exists' }] },
      }),
      // absent policyTypes without egress rules: kube-apiserver defaults it to [Ingress]
      np('defaulted-ingress', { podSelector: {} }),
      // cannot be evaluated (kube-apiserver refuses it): selects nothing
      np('bad-operator', { ...HTTPS.spec, podSelector: { matchExpressions: [{ key: 'app', operator: 'Like' }] } }),
    ];
    for (const p of others) assert.equal(selectsEgressOf(p, POD), false, p.metadata.name);
    assert.deepEqual(podEgressLayer(POD, others), { layer: undefined, policies: [], dropped: 0 });
    assert.deepEqual(podEgressLayer(POD, [...others, DNS]).policies, ['team/dns']);
  });

  it('matchExpressions that hold, and absent policyTypes with egress rules (defaulted to Egress), select', () => {
    const selecting = [
      np('expr-in', {
        ...HTTPS.spec,
        podSelector: { matchExpressions: [{ key: 'tier', operator: 'In', values: ['x', 'sandbox'] }] },
      }),
      np('expr-exists', { ...HTTPS.spec, podSelector: { matchExpressions: [{ key: 'app', operator: 'Exists' }] } }),
      np('expr-notin-absent', {
        ...HTTPS.spec,
        podSelector: { matchExpressions: [{ key: 'gpu', operator: 'NotIn', values: ['a'] }] },
      }),
      np('defaulted-egress', { podSelector: { matchLabels: { tier: 'sandbox' } }, egress: HTTPS.spec!.egress! }),
    ];
    for (const p of selecting) assert.equal(selectsEgressOf(p, POD), true, p.metadata.name);
  });

  it('a rule with an address that is not one is left out (denying more) and counted', () => {
    const bad = np('bad-cidr', {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [{ to: [{ ipBlock: { cidr: 'example.com' } }] }, { to: [{ ipBlock: { cidr: '192.0.2.0/24' } }] }],
    });
    const { layer, dropped } = podEgressLayer(POD, [bad]);
    assert.equal(dropped, 1);
    assert.deepEqual(layer?.rules, [{ action: 'allow', to: ['192.0.2.0/24'] }]);
  });
});

describe('podIngressLayer', () => {
  const FROM_OFFICE = np('from-office', {
    podSelector: { matchLabels: { app: 'agent' } },
    policyTypes: ['Ingress'],
    ingress: [
      {
        from: [
          { ipBlock: { cidr: '10.8.0.0/16', except: ['10.8.9.0/24'] } },
          { podSelector: { matchLabels: { app: 'web' } } },
          { ipBlock: { cidr: '192.0.2.7/32' } },
        ],
        ports: [{ port: 8080 }, { protocol: 'UDP', port: 5000, endPort: 5010 }, { port: 'http' }],
      },
    ],
  });

  it('converts `from` ipBlocks to the peers and `ports` to the guest ports; selector peers and named ports match nothing', () => {
    const ports = [
      { protocol: 'tcp', port: 8080 },
      { protocol: 'udp', port: 5000, endPort: 5010 },
    ];
    assert.deepEqual(podIngressLayer(POD, [FROM_OFFICE]), {
      layer: {
        source: 'NetworkPolicy team/from-office',
        rules: [
          { action: 'allow', to: ['10.8.0.0/16'], except: ['10.8.9.0/24'], ports },
          { action: 'allow', to: ['192.0.2.7/32'], ports },
        ],
        otherwise: 'deny',
      },
      policies: ['team/from-office'],
      dropped: 0,
    });
    assert.equal(podEgressLayer(POD, [FROM_OFFICE]).layer, undefined, 'an Ingress-only policy leaves egress alone');
  });

  it('a rule without `from` admits every peer on its ports; one without ports, every port', () => {
    const layer = networkPolicyIngressLayer('x', [{ ports: [{ protocol: 'TCP', port: 22 }] }, {}]);
    assert.deepEqual(layer.rules, [
      { action: 'allow', to: [], ports: [{ protocol: 'tcp', port: 22 }] },
      { action: 'allow', to: [] },
    ]);
    assert.equal(layer.otherwise, 'deny');
  });

  it('no policy selecting the pod for Ingress: no ingress layer (every peer); a selecting one with no rules: nobody', () => {
    assert.deepEqual(podIngressLayer(POD, [HTTPS]), { layer: undefined, policies: [], dropped: 0 }, 'Egress only');
    assert.equal(podIngressLayer(POD, [np('elsewhere', FROM_OFFICE.spec, 'other')]).layer, undefined);
    // DNS names Ingress in policyTypes without ingress rules: Kubernetes isolates the pod for ingress.
    assert.deepEqual(podIngressLayer(POD, [DNS, HTTPS]).layer, {
      source: 'NetworkPolicy team/dns',
      rules: [],
      otherwise: 'deny',
    });
  });

  it('absent policyTypes select for Ingress always (kube-apiserver defaults them so), Egress only with egress rules', () => {
    const bare = np('bare', { podSelector: {} });
    const egressOnly = np('egress-rules', { podSelector: {}, egress: HTTPS.spec!.egress! });
    assert.equal(selectsIngressOf(bare, POD), true);
    assert.equal(selectsIngressOf(egressOnly, POD), true);
    assert.equal(selectsEgressOf(egressOnly, POD), true);
    assert.equal(selectsIngressOf(HTTPS, POD), false, "policyTypes ['Egress'] leave ingress alone");
  });

  it("the template's managed secure default admits nobody at the pod address (its only peers are the router pods)", () => {
    const template = { metadata: { name: 'python' }, spec: {} } as Parameters<typeof desiredNetworkPolicySpec>[0];
    const spec = desiredNetworkPolicySpec(template, 'sandbox-system') as NetworkPolicy['spec'];
    const pod = { metadata: { namespace: 'team', labels: spec!.podSelector!.matchLabels! } };
    const { layer } = podIngressLayer(pod, [np('python-network-policy', spec)]);
    assert.deepEqual(layer, { source: 'NetworkPolicy team/python-network-policy', rules: [], otherwise: 'deny' });
  });

  it('the union of several selecting policies, in name order', () => {
    const ssh = np('a-ssh', { podSelector: {}, ingress: [{ ports: [{ port: 22 }] }] });
    const { layer, policies } = podIngressLayer(POD, [FROM_OFFICE, ssh, HTTPS]);
    assert.deepEqual(policies, ['team/a-ssh', 'team/from-office']);
    assert.deepEqual(layer?.rules[0], { action: 'allow', to: [], ports: [{ protocol: 'tcp', port: 22 }] });
    assert.equal(layer?.rules.length, 3);
  });
});

describe('labelSelectorFromObject', () => {
  it('evaluates matchLabels and matchExpressions like LabelSelectorAsSelector', () => {
    const labels = { a: '1', b: '2' };
    const cases: Array<[Parameters<typeof labelSelectorFromObject>[0], boolean | undefined]> = [
      [undefined, true],
      [{}, true],
      [{ matchLabels: { a: '1' } }, true],
      [{ matchLabels: { a: '2' } }, false],
      [{ matchExpressions: [{ key: 'b', operator: 'In', values: ['2', '3'] }] }, true],
      [{ matchExpressions: [{ key: 'b', operator: 'NotIn', values: ['2'] }] }, false],
      [{ matchExpressions: [{ key: 'c', operator: 'DoesNotExist' }] }, true],
      [{ matchLabels: { a: '1' }, matchExpressions: [{ key: 'c', operator: 'Exists' }] }, false],
      [{ matchExpressions: [{ key: 'a', operator: 'In', values: [] }] }, undefined],
      [{ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['1'] }] }, undefined],
      [{ matchExpressions: [{ key: 'a', operator: 'constructor' }] }, undefined],
    ];
    for (const [sel, want] of cases)
      assert.equal(labelSelectorFromObject(sel)?.matches(labels), want, JSON.stringify(sel));
  });
});
