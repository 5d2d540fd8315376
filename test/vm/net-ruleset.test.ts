/**
 * The egress lane's rules as text (src/vmm/net): interval math nft needs (no overlaps; ipBlock.except as a
 * subtraction) and the chains a policy becomes. What the rules do to packets is test/vm/network.test.ts's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { e2bTenantLayer, networkPolicyEgressLayer } from '../../src/api/vm-network.js';
import { destinations, nftSet } from '../../src/vmm/net/ranges.js';
import { hostRuleset, vmRuleset } from '../../src/vmm/net/ruleset.js';

describe('egress rules', () => {
  it('merges overlapping CIDRs and subtracts exceptions into disjoint ranges', () => {
    assert.equal(nftSet(destinations(['10.0.0.0/8', '10.1.0.0/16', '11.0.0.0/8'])), '{ 10.0.0.0-11.255.255.255 }');
    assert.equal(
      nftSet(destinations(['0.0.0.0/0'], ['10.0.0.0/8', '192.168.0.0/16'])),
      '{ 0.0.0.0-9.255.255.255, 11.0.0.0-192.167.255.255, 192.169.0.0-255.255.255.255 }',
    );
    assert.equal(nftSet(destinations(['1.2.3.4'])), '{ 1.2.3.4 }');
    assert.deepEqual(destinations(['fd00::/8']), [], 'IPv6 matches nothing here (the guest has none)');
    assert.deepEqual(destinations(['10.0.0.0/8'], ['10.0.0.0/8']), [], 'all excepted: the rule matches nothing');
  });

  it('the default: DNS to the resolver, then the secure-default layer (internal ranges dropped, the rest on)', () => {
    const text = vmRuleset(undefined, '203.0.113.9');
    assert.match(text, /dnat ip to 203\.0\.113\.9/);
    assert.match(text, /ip daddr 203\.0\.113\.9 meta l4proto \{ udp, tcp \} th dport 53 accept/);
    assert.match(
      text,
      /chain layer0 \{\n {4}# secure default\n {4}ip daddr \{ [^}]*10\.0\.0\.0-10\.255\.255\.255[^}]*\} drop\n {4}return\n/,
    );
    assert.doesNotMatch(text, /chain layer1/);
    assert.match(text, /meta nfproto ipv6 drop/);
    assert.doesNotMatch(vmRuleset(undefined, undefined), /dnat|dport 53/, 'no resolver: no DNS');
  });

  it('a tenant layer after the template layer; a NetworkPolicy layer denies what no rule allows', () => {
    const np = networkPolicyEgressLayer('NetworkPolicy ns/np', [
      {
        to: [{ ipBlock: { cidr: '10.1.0.0/16', except: ['10.1.2.0/24'] } }],
        ports: [{ protocol: 'TCP', port: 80, endPort: 90 }],
      },
      { to: [{ podSelector: {} }] }, // cannot be evaluated for a VM: matches nothing
      { ports: [{ protocol: 'UDP', port: 'dns' }] }, // a named port: matches nothing
    ]);
    assert.equal(np.rules.length, 1);
    const tenant = e2bTenantLayer({ allowOut: ['10.1.0.5'], denyOut: ['0.0.0.0/0'] });
    const text = vmRuleset({ template: np, tenant }, undefined);
    assert.match(text, /jump layer0\n {4}jump layer1\n {4}accept/);
    assert.match(
      text,
      /ip daddr \{ 10\.1\.0\.0-10\.1\.1\.255, 10\.1\.3\.0-10\.1\.255\.255 \} meta l4proto tcp th dport 80-90 return\n {4}drop\n/,
    );
    assert.match(
      text,
      /chain layer1 \{\n {4}# e2b network\n {4}ip daddr \{ 10\.1\.0\.5 \} return\n {4}drop\n {4}return\n/,
    );
  });

  it('e2b: allow_internet_access=false is a deny of everything; allowOut alone narrows nothing', () => {
    assert.deepEqual(e2bTenantLayer({ allowInternetAccess: false })?.rules, [{ action: 'deny', to: ['0.0.0.0/0'] }]);
    assert.equal(e2bTenantLayer({ allowOut: ['1.1.1.1'] }), undefined);
    assert.equal(e2bTenantLayer({ allowInternetAccess: true }), undefined);
  });

  it("the pod address is the guest's: DNAT'd in, judged by the ingress layer on sources, answers not by egress", () => {
    const ingress = {
      source: 'NetworkPolicy ns/in',
      rules: [{ action: 'allow' as const, to: ['10.9.0.0/16'] }],
      otherwise: 'deny' as const,
    };
    const text = vmRuleset({ ingress }, undefined, '10.200.0.6');
    assert.match(text, /iifname "eth0" ip daddr 10\.200\.0\.6 dnat ip to 10\.0\.2\.15/);
    assert.match(text, /ct status dnat jump ingress/);
    assert.match(
      text,
      /iifname "tap0" oifname "eth0" ct direction reply accept\n {4}iifname "tap0" oifname "eth0" jump egress/,
    );
    assert.match(
      text,
      /chain inlayer \{\n {4}# NetworkPolicy ns\/in\n {4}ip saddr \{ 10\.9\.0\.0-10\.9\.255\.255 \} return\n {4}drop/,
    );
    assert.doesNotMatch(
      vmRuleset(undefined, undefined),
      /dnat ip to 10\.0\.2\.15|ct direction reply/,
      'no pod address: no inbound',
    );
  });

  it("the node's table keeps VMs off the node and each other, and masquerades what leaves", () => {
    const text = hostRuleset();
    assert.match(text, /iifname "sbxv\*" drop/);
    assert.match(text, /iifname "sbxv\*" oifname "sbxv\*" drop/);
    assert.match(text, /iifname "sbxv\*" oifname != "sbxv\*" masquerade/);
  });
});
