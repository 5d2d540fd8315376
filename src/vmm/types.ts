/**
 * Shared types of the VMM layer: the VM lifecycle as an explicit state machine (docs/vm.md "Lifecycle"), template
 * and VM specs, and the driver interface that sandboxd builds on.
 */
import type { VmNetworkPolicy } from './net/policy.js';
import { SandboxError } from '../errors.js';

/** `auto` = KVM only where the CPU exposes VMX/SVM and a probe boot succeeds, else TCG. */
export type Accel = 'auto' | 'kvm' | 'tcg';
/**
 * `none` = no NIC; `egress` = a virtio NIC on a TAP in the VM's own network namespace, outbound through NAT on the
 * node under an egress policy enforced there (src/vmm/net, docs/vm.md "Networking").
 */
export type NetworkLane = 'none' | 'egress';

export type VmState = 'starting' | 'running' | 'paused' | 'hibernated' | 'failed' | 'destroyed';

export type VmAction =
  'exec' | 'pause' | 'resume' | 'hibernate' | 'restore' | 'checkpoint' | 'fork' | 'destroy' | 'stats';

/** Which actions each state admits; anything else is a typed refusal (vm.invalid-state). */
export const ALLOWED_ACTIONS: Readonly<Record<VmState, readonly VmAction[]>> = {
  starting: ['destroy', 'stats'],
  running: ['exec', 'pause', 'hibernate', 'checkpoint', 'fork', 'destroy', 'stats'],
  paused: ['resume', 'hibernate', 'checkpoint', 'fork', 'destroy', 'stats'],
  // checkpoint: a template made from the saved state (the VM stays hibernated; docs/placement.md "Resume anywhere").
  hibernated: ['restore', 'checkpoint', 'destroy', 'stats'],
  failed: ['destroy', 'stats'],
  destroyed: [],
};

export function assertAllowed(vmId: string, state: VmState, action: VmAction): void {
  if (ALLOWED_ACTIONS[state].includes(action)) return;
  const allowed = ALLOWED_ACTIONS[state];
  throw new SandboxError('vm.invalid-state', `cannot ${action} VM ${vmId}: it is ${state}`, {
    hint: allowed.length
      ? `in state ${state} the VM accepts: ${allowed.join(', ')}`
      : 'the VM is gone; create a new one',
  });
}

/** The guest image a template boots: kernel + initramfs (+ read-only root filesystem). */
export interface GuestImage {
  kernel: string;
  initramfs: string;
  rootfs?: string;
  rootfsType?: 'ext4' | 'squashfs';
  /** Content hash of kernel+initramfs+rootfs (keys template caches). */
  hash: string;
}

export interface TemplateSpec {
  /** Image-like name, e.g. `sandbox/base`. */
  name: string;
  image: GuestImage;
  /** @default 128 */
  memoryMiB?: number;
  /** @default 1 */
  vcpus?: number;
  /** @default 'none' */
  network?: NetworkLane;
  /** Commands run in the template before the snapshot (warm caches, e.g. start python once). */
  warmup?: readonly (readonly string[])[];
}

/** A snapshotted template on disk: clones map `memFile` copy-on-write and load `stateFile`. */
export interface Template {
  name: string;
  /** Content hash of everything that makes the snapshot. */
  hash: string;
  dir: string;
  memFile: string;
  stateFile: string;
  memoryMiB: number;
  vcpus: number;
  network: NetworkLane;
  accel: 'kvm' | 'tcg';
  image: GuestImage;
  /** The kernel cmdline the template booted with (clones must match its device set, not its cmdline). */
  cmdline: string;
  createdAt: string;
  /** Cold boot to agent answering, in ms (measured when the template was made). */
  bootMs: number;
}

export interface CloneOptions {
  /** VM id (default: generated `vm-<hex>`). */
  id?: string;
  /**
   * Deadline for the clone to answer. @default 15000 from a pre-loaded spare (it only resumes), 30000 when a new QEMU
   * loads the state file first (as a restore does)
   */
  readyTimeoutMs?: number;
  /** Free-form labels persisted with the VM (e.g. sandbox name). */
  labels?: Record<string, string>;
  signal?: AbortSignal;
  /**
   * Keep spare VMMs of the template topped up after this clone. Off for templates that live only as long as one
   * operation (a fork's) or are cloned now and then (a checkpoint's): a spare of those is a QEMU and a state load
   * spent on the busiest moment for a clone that may never come, racing the template's removal. @default true
   */
  keepSpares?: boolean;
}

export interface VmStats {
  id: string;
  state: VmState;
  pid?: number;
  /** Resident set size of the QEMU process. */
  rssKiB?: number;
  /** Proportional set size (shared template pages divided among clones). */
  pssKiB?: number;
  privateDirtyKiB?: number;
  /** User+system CPU time of the QEMU process. */
  cpuMs?: number;
  uptimeMs: number;
}

/** What is persisted in `<runDir>/vm.json` so a restarted daemon can list and re-adopt VMs. */
export interface VmRecord {
  id: string;
  state: VmState;
  pid?: number;
  /** /proc/<pid>/stat start time, to detect PID reuse. */
  pidStartTicks?: number;
  runDir: string;
  qmpSocket: string;
  agentSocket: string;
  template: { name: string; hash: string; dir: string };
  memoryMiB: number;
  vcpus: number;
  network: NetworkLane;
  accel: 'kvm' | 'tcg';
  labels: Record<string, string>;
  createdAt: string;
  /** Set while hibernated. */
  hibernateFile?: string;
  /** The argv QEMU was started with (for restore and diagnostics). */
  argv: string[];
  /** Egress lane: the VM's network namespace (created with the VM, removed with it). */
  netns?: VmNetns;
  /** Egress lane: the policy enforced in `netns` (absent = the secure default). */
  netPolicy?: VmNetworkPolicy;
}

/** A networked VM's namespace: its name and the /30 that joins it to the node. */
export interface VmNetns {
  name: string;
  /** The node-side end of the veth pair (`sbxv<hex>`). */
  hostIf: string;
  /** Node-side and namespace-side addresses on the veth (a /30 of the VM network CIDR). */
  hostAddress: string;
  nsAddress: string;
}
