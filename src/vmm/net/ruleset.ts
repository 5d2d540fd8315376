/**
 * The nftables rulesets of the egress lane (docs/vm.md "Networking"), as text for `nft -f`. Pure functions; the
 * unit tests read the output and the real-VM tests prove what it does.
 *
 * In each VM's namespace (table `inet sbx_vm`):
 *   tap0  10.0.2.2/24 (+ 10.0.2.3, the guest's DNS address)  <- the guest, 10.0.2.15 (src/guest/build/assets/init.sh)
 *   eth0  the namespace end of the veth pair, default route to the node end
 * Guest packets are forwarded tap0 -> eth0 only through the `egress` chain: IPv6 dropped, DNS to the node's resolver
 * accepted, then every policy layer in order (allow = on to the next layer, deny = drop), then masqueraded to the
 * namespace's veth address. Each packet is judged, not only a connection's first, so a narrowing applies at once
 * to connections already open. Nothing from the guest reaches the namespace itself (input policy drop).
 *
 * On the node (table `inet sbx_vmnet`, one for every sandboxd on the host, identical text): nothing from a VM's
 * veth reaches the node's own addresses (its loopback, pod and host addresses: the input hook sees them all) or
 * another VM's veth; what leaves for elsewhere is masqueraded to the node's address.
 */
import { effectiveLayers, type EgressLayer, type EgressRule, type VmNetworkPolicy } from './policy.js';
import { destinations, isEverything, nftSet } from './ranges.js';

/** Names inside every VM namespace (each namespace is its own, so they never collide). */
export const GUEST_LINK = 'tap0';
export const UPLINK = 'eth0';
export const TAP_ADDRESS = '10.0.2.2';
export const GUEST_DNS_ADDRESS = '10.0.2.3';
/** The guest's own address (src/guest/build/assets/init.sh). */
export const GUEST_ADDRESS = '10.0.2.15';
/** Locally administered, the same in every namespace (netns.ts says why). */
export const TAP_MAC = '02:73:62:78:00:02';
/** The node-side veth names all start with this (nft wildcard `sbxv*`); the cluster's own veths are `sbx<k>h`. */
export const HOST_IF_PREFIX = 'sbxv';

const VM_TABLE = 'sbx_vm';
const HOST_TABLE = 'sbx_vmnet';

/** Which end of a packet a layer's addresses are: the destination (egress) or the peer that sent it (ingress). */
type Side = 'daddr' | 'saddr';

/** nft statements of one rule; empty when the rule can match nothing here (e.g. only IPv6 addresses). */
function ruleStatements(rule: EgressRule, side: Side): string[] {
  const dest = destinations(rule.to, rule.except ?? []);
  if (!dest.length) return [];
  const verdict = rule.action === 'allow' ? 'return' : 'drop';
  const daddr = isEverything(dest) ? '' : `ip ${side} ${nftSet(dest)} `;
  if (!rule.ports?.length) return [`${daddr}${verdict}`];
  return rule.ports.map((p) => {
    const range =
      p.port === undefined ? '' : ` th dport ${p.endPort && p.endPort > p.port ? `${p.port}-${p.endPort}` : p.port}`;
    return `${daddr}meta l4proto ${p.protocol}${range} ${verdict}`;
  });
}

function layerChain(name: string, layer: EgressLayer, side: Side = 'daddr'): string[] {
  return [
    `  chain ${name} {`,
    `    # ${layer.source.replace(/[^\x20-\x7e]/g, '?')}`,
    ...layer.rules.flatMap((r) => ruleStatements(r, side)).map((s) => `    ${s}`),
    `    ${layer.otherwise === 'allow' ? 'return' : 'drop'}`,
    '  }',
  ];
}

/**
 * The whole table of a VM's namespace; applying it replaces the previous one in one transaction. With `podAddress`
 * (the namespace's veth address), what is sent to it from the node's side is the guest's: DNAT'd to 10.0.2.15 and
 * judged by the ingress layer (none = every peer), and the guest's answers on those connections go back unjudged
 * by the egress layers (their packets are the reply direction; the guest cannot make a reply of its own).
 */
export function vmRuleset(
  policy: VmNetworkPolicy | undefined,
  resolver: string | undefined,
  podAddress?: string,
): string {
  const layers = effectiveLayers(policy);
  const inbound = podAddress ? [`    iifname "${UPLINK}" ip daddr ${podAddress} dnat ip to ${GUEST_ADDRESS}`] : [];
  const ingress = policy?.ingress;
  const dnat = resolver
    ? [
        `    iifname "${GUEST_LINK}" ip daddr ${GUEST_DNS_ADDRESS} udp dport 53 dnat ip to ${resolver}`,
        `    iifname "${GUEST_LINK}" ip daddr ${GUEST_DNS_ADDRESS} tcp dport 53 dnat ip to ${resolver}`,
      ]
    : [];
  const dns = resolver ? [`    ip daddr ${resolver} meta l4proto { udp, tcp } th dport 53 accept`] : [];
  return [
    `table inet ${VM_TABLE}`,
    `delete table inet ${VM_TABLE}`,
    `table inet ${VM_TABLE} {`,
    '  chain prerouting {',
    '    type nat hook prerouting priority dstnat; policy accept;',
    ...dnat,
    ...inbound,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    oifname "${UPLINK}" masquerade`,
    '  }',
    '  chain input {',
    '    type filter hook input priority filter; policy drop;',
    '    iifname "lo" accept',
    `    iifname "${UPLINK}" ct state established,related accept`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority filter; policy drop;',
    `    iifname "${UPLINK}" oifname "${GUEST_LINK}" ct state established,related accept`,
    ...(podAddress
      ? [
          `    iifname "${UPLINK}" oifname "${GUEST_LINK}" ct status dnat jump ingress`,
          `    iifname "${GUEST_LINK}" oifname "${UPLINK}" ct direction reply accept`,
        ]
      : []),
    `    iifname "${GUEST_LINK}" oifname "${UPLINK}" jump egress`,
    '  }',
    '  chain ingress {',
    '    meta nfproto ipv6 drop',
    ...(ingress ? ['    jump inlayer'] : []),
    '    accept',
    '  }',
    ...(ingress ? layerChain('inlayer', ingress, 'saddr') : []),
    '  chain egress {',
    '    meta nfproto ipv6 drop',
    ...dns,
    ...layers.map((_, i) => `    jump layer${i}`),
    '    accept',
    '  }',
    ...layers.flatMap((l, i) => layerChain(`layer${i}`, l)),
    '}',
    '',
  ].join('\n');
}

/** The node's table: identical from every sandboxd, so re-applying it is harmless. */
export function hostRuleset(): string {
  const vm = `"${HOST_IF_PREFIX}*"`;
  return [
    `table inet ${HOST_TABLE}`,
    `delete table inet ${HOST_TABLE}`,
    `table inet ${HOST_TABLE} {`,
    '  chain input {',
    '    type filter hook input priority filter - 10; policy accept;',
    `    iifname ${vm} ct state established,related accept`,
    `    iifname ${vm} drop`,
    '  }',
    '  chain forward {',
    '    type filter hook forward priority filter - 10; policy accept;',
    `    iifname ${vm} oifname ${vm} drop`,
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    iifname ${vm} oifname != ${vm} masquerade`,
    '  }',
    '}',
    '',
  ].join('\n');
}
