/** Driver options resolved once (option -> env -> default). The only place in src/vmm that reads process.env. */
import { accessSync, constants, mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { nodeResolver } from './net/netns.js';
import type { Accel } from './types.js';

/** Where networked VMs' veth /30s (and so their pod addresses) come from unless told otherwise. */
export const DEFAULT_VM_NETWORK_CIDR = '10.200.0.0/16';

export interface QemuDriverOptions {
  /** @default `qemu-system-x86_64` (env SBX_QEMU) */
  qemuBinary?: string;
  /** @default 'auto' (env SBX_ACCEL) */
  accel?: Accel;
  /** Per-VM run dirs (sockets, pid, logs). Keep it short: unix socket paths are limited to 107 bytes.
   * @default /run/sandbox-operator/vms as root, else $XDG_RUNTIME_DIR/sandbox-operator/vms, else /tmp/sbx-<uid>/vms (env SBX_RUN_DIR) */
  runRoot?: string;
  /** Template snapshots (RAM file + device state). @default ${SBX_CACHE_DIR:-~/.cache/sandbox-operator}/vm/templates */
  templateRoot?: string;
  /**
   * Where a hibernated VM's saved state goes (`<id>.state`): its RAM, so on disk, never under /run, which is often a
   * tmpfs (a hibernated sandbox would then still hold its RAM). @default the VM's run dir
   */
  stateRoot?: string;
  /** Host TSC kHz for the guest's calibration args. @default read from the host */
  tscKHz?: number;
  /** Unprivileged user QEMU drops to when we run as root; `null` disables. @default 'nobody' if present */
  runAs?: string | null;
  /**
   * Spare VMMs per template: QEMU processes started ahead of demand with the template's state already
   * loaded and the guest paused (it has run no instruction), so a clone skips process start-up and
   * state load (~40 ms here). Kept only for templates cloned at least once; each costs a few MB of host
   * memory. Callers that enable them must call destroyAll() before exiting. @default 0
   */
  spareVmms?: number;
  /** Extra QEMU arguments for diagnostics; `{runDir}` is replaced by the VM's run dir. (env SBX_QEMU_EXTRA_ARGS, space-separated) */
  extraQemuArgs?: readonly string[];
  /** Egress lane: the CIDR the per-VM veth /30s come from. @default 10.200.0.0/16 (env SBX_VM_NETWORK_CIDR) */
  vmNetworkCidr?: string;
  /** Egress lane: the resolver guests' DNS goes to; `null` = no DNS. @default the node's first non-loopback nameserver */
  vmResolver?: string | null;
  /** Egress lane: the slot directory every sandboxd on the host shares. @default /run/sandbox-operator/vmnet (env SBX_VMNET_DIR) */
  vmNetworkSlotDir?: string;
}

export interface ResolvedDriverOptions {
  readonly qemuBinary: string;
  readonly accel: Accel;
  readonly runRoot: string;
  readonly templateRoot: string;
  readonly stateRoot: string | undefined;
  readonly tscKHz: number | undefined;
  readonly runAs: string | null | undefined;
  readonly spareVmms: number;
  readonly extraQemuArgs: readonly string[];
  readonly vmNetworkCidr: string;
  readonly vmResolver: string | undefined;
  readonly vmNetworkSlotDir: string;
  /** The test runner's marker (env SBX_TEST_RUN_ID), recorded with what a run makes so its leak check finds it. */
  readonly runMarker: string | undefined;
}

function writable(dir: string): boolean {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

export function resolveDriverOptions(opts: QemuDriverOptions = {}): ResolvedDriverOptions {
  const env = process.env;
  const accel = (opts.accel ?? (env.SBX_ACCEL as Accel | undefined) ?? 'auto') as Accel;
  let runRoot = opts.runRoot ?? env.SBX_RUN_DIR;
  if (!runRoot) {
    const candidates = [
      process.getuid?.() === 0 ? '/run/sandbox-operator/vms' : undefined,
      env.XDG_RUNTIME_DIR ? join(env.XDG_RUNTIME_DIR, 'sandbox-operator', 'vms') : undefined,
      `/tmp/sbx-${process.getuid?.() ?? 'u'}/vms`,
    ].filter((c): c is string => c !== undefined);
    runRoot = candidates.find(writable) ?? candidates[candidates.length - 1]!;
  }
  const cacheBase = env.SBX_CACHE_DIR ?? join(homedir(), '.cache', 'sandbox-operator');
  return {
    qemuBinary: opts.qemuBinary ?? env.SBX_QEMU ?? 'qemu-system-x86_64',
    accel,
    runRoot,
    templateRoot: opts.templateRoot ?? join(cacheBase, 'vm', 'templates'),
    stateRoot: opts.stateRoot,
    tscKHz: opts.tscKHz,
    runAs: opts.runAs,
    spareVmms: Math.max(0, Math.floor(opts.spareVmms ?? 0)),
    extraQemuArgs: opts.extraQemuArgs ?? (env.SBX_QEMU_EXTRA_ARGS ?? '').split(' ').filter(Boolean),
    vmNetworkCidr: opts.vmNetworkCidr ?? env.SBX_VM_NETWORK_CIDR ?? DEFAULT_VM_NETWORK_CIDR,
    vmResolver: opts.vmResolver === null ? undefined : (opts.vmResolver ?? nodeResolver()),
    vmNetworkSlotDir: opts.vmNetworkSlotDir ?? env.SBX_VMNET_DIR ?? '/run/sandbox-operator/vmnet',
    runMarker: env.SBX_TEST_RUN_ID,
  };
}
