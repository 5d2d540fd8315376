import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { writeFile } from 'node:fs/promises';
import { SandboxError } from '../errors.js';
import { DEFAULT_VM_NETWORK_CIDR } from '../vmm/options.js';

const run = promisify(execFile);

/**
 * How the apiserver reaches our own servers — decided once, here.
 *
 * Webhooks can use a loopback URL, but an APIService must name a Service whose Endpoints reject loopback
 * addresses, and the apiserver dials virtual-kubelet Nodes at their InternalIP (also never loopback). So each
 * local cluster gets its own network namespace `sbx-<k>` joined to the host by a veth pair on 10.213.<k>.0/24:
 *
 *   host side  `sbx<k>h`  10.213.<k>.1   <- our servers listen here: conversion webhook, aggregated apiserver
 *                                           (Endpoints), sandboxd + virtual-kubelet nodes (Node InternalIP, one
 *                                           kubelet port per node via status.daemonEndpoints)
 *   netns side `sbx<k>n`  10.213.<k>.2   <- etcd, kube-apiserver, controller-manager, scheduler and kwok run
 *                                           inside the namespace; clients use https://10.213.<k>.2:6443
 *
 * Both ends are interfaces this project created on this machine; no packet leaves it. Deleting the namespace
 * deletes the veth pair with it.
 */
export interface ClusterNetwork {
  index: number;
  netns: string;
  hostInterface: string;
  /** Address of this machine on the cluster link: where the apiserver reaches our servers. */
  hostAddress: string;
  /** Address of the control plane inside the namespace. */
  apiAddress: string;
}

const SUBNET_PREFIX = '10.213';

async function ip(args: string[]): Promise<string> {
  try {
    const { stdout } = await run('ip', args, { timeout: 15_000 });
    return stdout;
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT')
      throw new SandboxError('cluster.network', 'ip (iproute2) not found', { hint: 'apt-get install iproute2' });
    throw new SandboxError('cluster.network', `ip ${args.join(' ')} failed: ${(e.stderr ?? e.message).trim()}`, {
      cause: err,
      hint:
        process.getuid?.() === 0
          ? undefined
          : 'the local cluster needs root (CAP_NET_ADMIN) to create its network namespace',
    });
  }
}

export async function listClusterNamespaces(): Promise<string[]> {
  const out = await ip(['netns', 'list']).catch(() => '');
  return out
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => /^sbx-\d+$/.test(n));
}

/** Create a fresh namespace + veth pair. `ip netns add` failing on an existing name is the allocation lock. */
export async function createClusterNetwork(): Promise<ClusterNetwork> {
  if (process.getuid?.() !== 0) {
    throw new SandboxError('cluster.network', 'the local cluster needs root to create its network namespace', {
      hint: 'run as root (CI and the dev machines run as root)',
    });
  }
  const used = new Set(await listClusterNamespaces());
  const links = await ip(['-o', 'link', 'show']);
  for (let index = 1; index < 250; index++) {
    const netns = `sbx-${index}`;
    const hostInterface = `sbx${index}h`;
    if (used.has(netns) || links.includes(` ${hostInterface}@`) || links.includes(` ${hostInterface}:`)) continue;
    try {
      await run('ip', ['netns', 'add', netns]);
    } catch {
      continue; // taken by a concurrent process between our list and add
    }
    const net: ClusterNetwork = {
      index,
      netns,
      hostInterface,
      hostAddress: `${SUBNET_PREFIX}.${index}.1`,
      apiAddress: `${SUBNET_PREFIX}.${index}.2`,
    };
    try {
      const peer = `sbx${index}n`;
      await ip(['link', 'add', hostInterface, 'type', 'veth', 'peer', 'name', peer]);
      await ip(['link', 'set', peer, 'netns', netns]);
      await ip(['addr', 'add', `${net.hostAddress}/24`, 'dev', hostInterface]);
      await ip(['link', 'set', hostInterface, 'up']);
      await ip(['-n', netns, 'addr', 'add', `${net.apiAddress}/24`, 'dev', peer]);
      await ip(['-n', netns, 'link', 'set', peer, 'up']);
      await ip(['-n', netns, 'link', 'set', 'lo', 'up']);
      // Networked VMs' pod addresses (src/vmm/net) are reached from the cluster through this machine: a route to
      // their range, and forwarding on this link (our own interface; no global sysctl changes).
      await ip(['-n', netns, 'route', 'add', DEFAULT_VM_NETWORK_CIDR, 'via', net.hostAddress]);
      await writeFile(`/proc/sys/net/ipv4/conf/${hostInterface}/forwarding`, '1');
      return net;
    } catch (err) {
      await deleteClusterNetwork(net);
      throw err;
    }
  }
  throw new SandboxError('cluster.network', 'no free sbx-<k> network namespace slot', {
    hint: 'run `sbx down --all` to remove stale ones',
  });
}

export async function deleteClusterNetwork(net: Pick<ClusterNetwork, 'netns' | 'hostInterface'>): Promise<void> {
  await run('ip', ['netns', 'del', net.netns]).catch(() => {});
  await run('ip', ['link', 'del', net.hostInterface]).catch(() => {});
}

/** argv prefix that runs a command inside the namespace (ip execs in place, so the PID is the command's). */
export function inNamespace(netns: string, argv: string[]): string[] {
  return ['ip', 'netns', 'exec', netns, ...argv];
}
