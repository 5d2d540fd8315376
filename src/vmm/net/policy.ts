/**
 * The egress policy as the VMM enforces it: the shapes of src/api/vm-network.ts's schema (which validates what
 * the APIs receive; the VMM layer imports nothing of src/api), and the secure default that applies where no
 * template layer is given.
 */

export interface EgressPort {
  protocol: 'tcp' | 'udp' | 'sctp';
  port?: number;
  endPort?: number;
}

export interface EgressRule {
  action: 'allow' | 'deny';
  /** Destinations; empty = any address. */
  to: string[];
  except?: string[];
  /** Empty or absent = every port and protocol. */
  ports?: EgressPort[];
}

export interface EgressLayer {
  source: string;
  rules: EgressRule[];
  otherwise: 'allow' | 'deny';
}

export interface VmNetworkPolicy {
  template?: EgressLayer;
  tenant?: EgressLayer;
  /** Who may open connections to the VM's pod address; its rules' `to` are the peers. Absent = anyone routed there. */
  ingress?: EgressLayer;
}

/** What the secure default denies: loopback, private, link-local, CGNAT, multicast, reserved. */
export const INTERNAL_IPV4_RANGES: readonly string[] = [
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // private
  '100.64.0.0/10', // CGNAT (also where some clouds put metadata and DNS)
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local, cloud instance metadata
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
];

/** The egress lane's default (e2b's default too): internet on, internal ranges off. */
export function secureDefaultLayer(): EgressLayer {
  return { source: 'secure default', rules: [{ action: 'deny', to: [...INTERNAL_IPV4_RANGES] }], otherwise: 'allow' };
}

/** The layers a VM enforces, in order. */
export function effectiveLayers(policy: VmNetworkPolicy | undefined): EgressLayer[] {
  const layers = [policy?.template ?? secureDefaultLayer()];
  if (policy?.tenant) layers.push(policy.tenant);
  return layers;
}
