/**
 * One network namespace per networked VM (docs/vm.md "Networking"): made when the VM's QEMU is prepared (so a warm
 * VM's is ready before any claim), removed with the VM, swept when the VM it was made for is gone.
 *
 * Each namespace takes a /30 of the VM network CIDR for its veth pair to the node. Allocation is a slot file
 * created with O_EXCL in a directory every sandboxd on the host shares, so two daemons (or a daemon and its
 * successor) never hand out one /30 twice; the file names the VM and the run root that owns it, which is how a
 * restarted daemon finds what its predecessor left.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, openSync, closeSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import type { VmNetworkPolicy } from './policy.js';
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import type { VmNetns } from '../types.js';
import { intToIpv4, ipv4Interval } from './ranges.js';
import {
  GUEST_DNS_ADDRESS,
  GUEST_LINK,
  HOST_IF_PREFIX,
  TAP_ADDRESS,
  TAP_MAC,
  UPLINK,
  hostRuleset,
  vmRuleset,
} from './ruleset.js';

export interface VmNetworkOptions {
  /** Where the /30s of the veth pairs come from. @default 10.200.0.0/16 */
  cidr: string;
  /** The DNS server the guest's 10.0.2.3 is forwarded to; undefined = DNS refused. */
  resolver: string | undefined;
  /** Slot files, shared by every sandboxd on the host. @default /run/sandbox-operator/vmnet */
  slotDir: string;
  /** The run root of the driver that owns the namespaces it makes (the sweep's key). */
  owner: string;
  /** The user QEMU drops to, which must be able to open the TAP. */
  tapUser: string | undefined;
  /** Written into each slot (see SlotFile.run). */
  runMarker?: string;
}

interface SlotFile {
  netns: string;
  vm: string;
  owner: string;
  /** The test runner's run marker (SBX_TEST_RUN_ID), so its leak check finds what a run left. */
  run?: string;
}

const NETNS_PREFIX = 'sbxvm-';

function run(cmd: string, args: readonly string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { timeout: 15_000 }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      const e = err as NodeJS.ErrnoException;
      reject(
        new SandboxError(
          'vm.network',
          e.code === 'ENOENT'
            ? `${cmd} not found`
            : `${cmd} ${args.join(' ')} failed: ${(stderr || e.message).trim().slice(0, 2000)}`,
          {
            hint:
              e.code === 'ENOENT'
                ? 'install iproute2 and nftables (scripts/bootstrap.sh; the sandboxd image has them)'
                : 'networked VMs need root (CAP_NET_ADMIN, CAP_SYS_ADMIN) on the node',
          },
        ),
      );
    });
    // A command that fails fast closes its stdin before we write: that is its exit status's to report, not EPIPE's.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input ?? '');
  });
}

/** The first IPv4 nameserver of resolv.conf that a namespace can reach (not loopback). */
export function nodeResolver(resolvConf = '/etc/resolv.conf'): string | undefined {
  try {
    for (const line of readFileSync(resolvConf, 'utf8').split('\n')) {
      const m = /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(line);
      if (m && !m[1]!.startsWith('127.')) return m[1];
    }
  } catch {
    /* no resolv.conf: DNS is refused */
  }
  return undefined;
}

/** The namespaces a test run (SBX_TEST_RUN_ID) made and did not remove. */
export function namespacesOfRun(slotDir: string, run: string): string[] {
  let names: string[];
  try {
    names = readdirSync(slotDir);
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of names) {
    try {
      const slot = JSON.parse(readFileSync(join(slotDir, name), 'utf8')) as SlotFile;
      if (slot.run === run) out.push(slot.netns);
    } catch {
      /* being written */
    }
  }
  return out;
}

export class VmNetworks {
  private readonly base: number;
  private readonly slots: number;
  private hostReady: Promise<void> | undefined;

  constructor(
    readonly options: VmNetworkOptions,
    private readonly log: Logger,
  ) {
    const range = ipv4Interval(options.cidr);
    if (!range || !options.cidr.includes('/'))
      throw new SandboxError('vm.invalid-argument', `VM network CIDR "${options.cidr}" is not an IPv4 CIDR`, {
        hint: 'e.g. 10.200.0.0/16',
      });
    this.base = range[0];
    this.slots = Math.floor((range[1] - range[0] + 1) / 4);
    if (this.slots < 1)
      throw new SandboxError('vm.invalid-argument', `VM network CIDR ${options.cidr} is smaller than a /30`);
  }

  /** The node's own table; once per process (its text is the same from every daemon). */
  private ensureHost(): Promise<void> {
    this.hostReady ??= run('nft', ['-f', '-'], hostRuleset()).then(
      () => undefined,
      (err: unknown) => {
        this.hostReady = undefined;
        throw err;
      },
    );
    return this.hostReady;
  }

  private claimSlot(vm: string): { index: number; file: string; netns: string } {
    mkdirSync(this.options.slotDir, { recursive: true, mode: 0o700 });
    const taken = new Set(readdirSync(this.options.slotDir));
    const netns = `${NETNS_PREFIX}${vm}`;
    for (let index = 0; index < this.slots; index++) {
      const name = String(index);
      if (taken.has(name)) continue;
      const file = join(this.options.slotDir, name);
      try {
        closeSync(openSync(file, 'wx', 0o600));
      } catch {
        continue; // another daemon took it between our listing and our create
      }
      const run = this.options.runMarker;
      const slot: SlotFile = { netns, vm, owner: this.options.owner, ...(run ? { run } : {}) };
      writeFileSync(file, JSON.stringify(slot));
      return { index, file, netns };
    }
    throw new SandboxError('vm.network', `no free /30 left in the VM network ${this.options.cidr}`, {
      hint: 'destroy VMs, or give sandboxd a larger --vm-network-cidr',
    });
  }

  /** Make the namespace of VM `vm` with `policy` enforced; undone entirely when any step fails. */
  async create(vm: string, policy: VmNetworkPolicy | undefined): Promise<VmNetns> {
    await this.ensureHost();
    const { index, file, netns } = this.claimSlot(vm);
    const hostIf = `${HOST_IF_PREFIX}${index}`;
    const ns: VmNetns = {
      name: netns,
      hostIf,
      hostAddress: intToIpv4(this.base + index * 4 + 1),
      nsAddress: intToIpv4(this.base + index * 4 + 2),
    };
    try {
      // A namespace or link of this name left by a crash before its slot file was written fails the add: it is
      // removed and the add made once more (only then: each command is a process, and this is a clone's path).
      const veth = ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', UPLINK, 'netns', netns];
      await run('ip', ['netns', 'add', netns]).catch(async () => {
        await run('ip', ['netns', 'del', netns]).catch(() => undefined);
        await run('ip', ['netns', 'add', netns]);
      });
      await run('ip', veth).catch(async () => {
        await run('ip', ['link', 'del', hostIf]).catch(() => undefined);
        await run('ip', veth);
      });
      await run(
        'ip',
        ['-batch', '-'],
        [`addr add ${ns.hostAddress}/30 dev ${hostIf}`, `link set ${hostIf} up`, ''].join('\n'),
      );
      // Forwarding is turned on for this interface only: the node's other interfaces keep their setting.
      writeFileSync(`/proc/sys/net/ipv4/conf/${hostIf}/forwarding`, '1');
      const tapUser = this.options.tapUser ? ` user ${this.options.tapUser}` : '';
      await run(
        'ip',
        ['-n', netns, '-batch', '-'],
        [
          'link set lo up',
          `addr add ${ns.nsAddress}/30 dev ${UPLINK}`,
          `link set ${UPLINK} up`,
          `route add default via ${ns.hostAddress}`,
          `tuntap add dev ${GUEST_LINK} mode tap${tapUser}`,
          // One MAC for every VM's gateway: a guest restored into another namespace (a clone of a checkpoint, a
          // fork child) keeps the gateway's MAC in its ARP cache, and a new random one would drop its frames.
          `link set ${GUEST_LINK} address ${TAP_MAC}`,
          `addr add ${TAP_ADDRESS}/24 dev ${GUEST_LINK}`,
          // The guest's resolver address lives on the TAP so the guest's ARP for it is answered; what is sent to
          // it is forwarded to the node's resolver (ruleset.ts) and nothing else reaches it.
          `addr add ${GUEST_DNS_ADDRESS}/32 dev ${GUEST_LINK}`,
          `link set ${GUEST_LINK} up`,
          '',
        ].join('\n'),
      );
      // Forwarding in the namespace and its first ruleset in one process.
      await this.inNamespace(
        netns,
        'sh',
        ['-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward && exec nft -f -'],
        vmRuleset(policy, this.options.resolver, ns.nsAddress),
      );
      return ns;
    } catch (err) {
      await this.remove(ns.name, hostIf, file);
      throw err;
    }
  }

  private inNamespace(netns: string, cmd: string, args: readonly string[], input?: string): Promise<string> {
    return run('nsenter', [`--net=/run/netns/${netns}`, '--', cmd, ...args], input);
  }

  /** Replace the namespace's ruleset in one transaction (a narrowing also cuts connections already open). */
  async apply(ns: VmNetns, policy: VmNetworkPolicy | undefined): Promise<void> {
    await this.inNamespace(ns.name, 'nft', ['-f', '-'], vmRuleset(policy, this.options.resolver, ns.nsAddress));
  }

  /** Whether the namespace is still there (a node reboot empties /run). */
  exists(ns: VmNetns): boolean {
    return existsSync(`/run/netns/${ns.name}`);
  }

  /** Remove the namespace, its veth pair and its slot. Never throws: a half-made namespace is removed as far as it got. */
  async destroy(ns: VmNetns): Promise<void> {
    const index = ns.hostIf.slice(HOST_IF_PREFIX.length);
    await this.remove(ns.name, ns.hostIf, join(this.options.slotDir, index));
  }

  private async remove(netns: string, hostIf: string, slotFile: string): Promise<void> {
    await run('ip', ['link', 'del', hostIf]).catch(() => undefined);
    await run('ip', ['netns', 'del', netns]).catch((err: unknown) =>
      this.log.debug({ netns, err: (err as Error).message }, 'netns already gone'),
    );
    try {
      const slot = JSON.parse(readFileSync(slotFile, 'utf8')) as SlotFile;
      if (slot.netns !== netns) return; // reused by another VM since: not ours to free
    } catch {
      /* unreadable or empty: ours, half-written */
    }
    rmSync(slotFile, { force: true });
  }

  /**
   * Remove what this owner made for VMs that are gone (`alive(vm)` false): their namespaces, veths and slots.
   * Returns how many were removed.
   */
  async sweep(alive: (vm: string) => boolean): Promise<number> {
    let n = 0;
    let names: string[];
    try {
      names = readdirSync(this.options.slotDir);
    } catch {
      return 0;
    }
    for (const name of names) {
      const file = join(this.options.slotDir, name);
      let slot: SlotFile;
      try {
        slot = JSON.parse(readFileSync(file, 'utf8')) as SlotFile;
      } catch {
        continue; // being written by its maker right now
      }
      if (slot.owner !== this.options.owner || alive(slot.vm)) continue;
      await this.remove(slot.netns, `${HOST_IF_PREFIX}${name}`, file);
      n++;
    }
    if (n) this.log.info({ removed: n }, 'removed the network namespaces of VMs that are gone');
    return n;
  }
}
