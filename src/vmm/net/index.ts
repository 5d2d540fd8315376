/** The egress lane's networking: one namespace, TAP and nftables ruleset per networked VM (docs/vm.md "Networking"). */
import { SandboxError } from '../../errors.js';
import type { VmRecord } from '../types.js';

export { VmNetworks, namespacesOfRun, nodeResolver, type VmNetworkOptions } from './netns.js';
export { vmRuleset, hostRuleset, GUEST_DNS_ADDRESS } from './ruleset.js';
export { INTERNAL_IPV4_RANGES, secureDefaultLayer, type VmNetworkPolicy, type EgressLayer } from './policy.js';

/** A network policy is only for a VM with a NIC. */
export function assertNetworked(record: Pick<VmRecord, 'id' | 'network'>): void {
  if (record.network !== 'egress')
    throw new SandboxError(
      'vm.invalid-argument',
      `VM ${record.id} has no network (net=none): a network policy needs the egress lane`,
      {
        hint: 'create the sandbox with net=egress',
      },
    );
}
