/**
 * What a QEMU is started with: the launch plan, the guest kernel's command line and the full argv, plus the
 * reverse (the image and command line read back from a recorded argv). Template boots, clones and restores
 * differ only in their memory backend and `-incoming`.
 */
import { join } from 'node:path';
import { unprivilegedUser } from './host.js';
import type { ResolvedDriverOptions } from './options.js';
import type { NetworkLane, Template } from './types.js';

const GUEST_HZ = 100; // CONFIG_HZ_100 in our kernel fragment

export type MemBackend = { kind: 'file'; path: string; share: boolean } | { kind: 'ram' };

export interface LaunchPlan {
  id: string;
  runDir: string;
  accel: 'kvm' | 'tcg';
  memoryMiB: number;
  vcpus: number;
  network: NetworkLane;
  /** Egress lane: the VM's network namespace (QEMU runs in it, on its TAP); none = a NIC on a dead-end hub (a QEMU
   * that only loads or saves state, or a template boot: nothing of the guest's reaches any network). */
  netns?: string;
  image: Template['image'];
  cmdline: string;
  mem: MemBackend;
  incoming: boolean;
}

/** `tscKHz` is only asked for under TCG (reading it may run dmesg). */
export function kernelCmdline(
  spec: { image: Template['image']; network: NetworkLane },
  accel: 'kvm' | 'tcg',
  tscKHz: () => number,
): string {
  const parts = ['console=ttyS0', 'quiet', 'panic=-1', 'random.trust_cpu=on'];
  if (accel === 'tcg') {
    // Mandatory under TCG: without them 20-60 % of boots hang calibrating the TSC against the PIT.
    const khz = tscKHz();
    parts.push(`tsc_early_khz=${khz}`, `lpj=${Math.round((khz * 1000) / GUEST_HZ)}`, 'tsc=reliable');
    // QEMU's emulated APIC bus runs at 1 GHz; our kernel's lapic_timer_period parameter (build-kernel.sh)
    // then skips ~0.26 s of APIC timer calibration against the PIT.
    parts.push(`lapic_timer_period=${1_000_000_000 / GUEST_HZ}`);
  }
  if (spec.image.rootfs) parts.push('sbx.root=/dev/vda', `sbx.rootfstype=${spec.image.rootfsType ?? 'ext4'}`);
  if (spec.network === 'egress') parts.push('sbx.net=1');
  return parts.join(' ');
}

/** The full QEMU argv for a plan. */
export function qemuArgv(plan: LaunchPlan, options: Pick<ResolvedDriverOptions, 'runAs' | 'extraQemuArgs'>): string[] {
  const d = plan.runDir;
  // process= sets the comm name, so `ps` shows which VM a QEMU is.
  const a: string[] = ['-name', `sbx-${plan.id},process=sbx-${plan.id}`];
  a.push('-M', 'microvm,acpi=off,memory-backend=mem0');
  a.push('-accel', plan.accel, '-cpu', plan.accel === 'kvm' ? 'host' : 'max');
  a.push('-m', `${plan.memoryMiB}M`, '-smp', String(plan.vcpus));
  a.push('-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot');
  a.push('-chardev', `file,id=con,path=${join(d, 'console.log')}`, '-serial', 'chardev:con');
  // Incoming VMs get their RAM from the snapshot; loading the kernel again would only cost heap
  // (QEMU keeps ELF segments as ROM blobs: ~20 MB private memory per clone).
  if (!plan.incoming) a.push('-kernel', plan.image.kernel, '-initrd', plan.image.initramfs, '-append', plan.cmdline);
  if (plan.mem.kind === 'file') {
    a.push(
      '-object',
      `memory-backend-file,id=mem0,size=${plan.memoryMiB}M,mem-path=${plan.mem.path},share=${plan.mem.share ? 'on' : 'off'}`,
    );
  } else {
    a.push('-object', `memory-backend-ram,id=mem0,size=${plan.memoryMiB}M`);
  }
  // One port (the agent; id 0 is reserved for a console): the default 31 ports cost the guest ~60 ms of
  // virtqueue setup at boot under TCG.
  a.push('-device', 'virtio-serial-device,max_ports=2');
  a.push('-chardev', `socket,id=agent,path=${join(d, 'agent.sock')},server=on,wait=off`);
  a.push('-device', 'virtserialport,chardev=agent,name=sandbox.agent');
  a.push(
    '-chardev',
    `socket,id=qmp,path=${join(d, 'qmp.sock')},server=on,wait=off`,
    '-mon',
    'chardev=qmp,mode=control',
  );
  if (plan.image.rootfs) {
    a.push(
      '-drive',
      `file=${plan.image.rootfs},if=none,id=rootfs,format=raw,readonly=on`,
      '-device',
      'virtio-blk-device,drive=rootfs',
    );
  }
  if (plan.network === 'egress') {
    // The backend is the host's business: a snapshot taken on one loads on the other (virtio-net's state is the
    // device's). The TAP (net/netns.ts) has no IP configuration of QEMU's own, unlike user networking (slirp),
    // which gave every guest the host's loopback at 10.0.2.2.
    // vnet_hdr=off: the device then offers the guest the same features on both backends, so a state saved on
    // one loads on the other (a guest that negotiated the TAP's offloads cannot be loaded behind a hub port).
    const backend = plan.netns ? 'tap,id=n0,ifname=tap0,script=no,downscript=no,vnet_hdr=off' : 'hubport,id=n0,hubid=0';
    a.push('-netdev', backend, '-device', 'virtio-net-device,netdev=n0');
  }
  a.push('-object', 'rng-random,id=rng0,filename=/dev/urandom', '-device', 'virtio-rng-device,rng=rng0');
  const runAs = options.runAs === null ? undefined : (options.runAs ?? unprivilegedUser());
  // Hardening: seccomp sandbox; QEMU never spawns (migration goes to our sockets/fds); drop to an unprivileged user.
  a.push('-sandbox', `on,obsolete=deny,elevateprivileges=${runAs ? 'allow' : 'deny'},spawn=deny,resourcecontrol=deny`);
  if (runAs) a.push('-runas', runAs);
  if (plan.incoming) a.push('-incoming', 'defer');
  // Diagnostics only (e.g. `-d in_asm -D {runDir}/tcg.log` to count what TCG translates; docs/vm.md).
  for (const x of options.extraQemuArgs) a.push(x.replaceAll('{runDir}', d));
  return a;
}

/** Image and cmdline from the argv a VM was launched with (its template may be gone); `hash` is its image's. */
export function imageFromArgv(argv: readonly string[], hash: string): { image: Template['image']; cmdline: string } {
  const val = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const drive = argv.find((x) => x.startsWith('file=') && x.includes('id=rootfs'));
  const rootfs = drive ? /^file=([^,]+)/.exec(drive)?.[1] : undefined;
  const cmdline = val('-append') ?? '';
  const image: Template['image'] = { kernel: val('-kernel') ?? '', initramfs: val('-initrd') ?? '', hash };
  if (rootfs) {
    image.rootfs = rootfs;
    image.rootfsType = /sbx\.rootfstype=squashfs/.test(cmdline) ? 'squashfs' : 'ext4';
  }
  return { image, cmdline };
}
