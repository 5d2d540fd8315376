/** Facts about the host that QEMU launches depend on: TSC frequency, acceleration, QEMU binary. */
import { accessSync, constants, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { SandboxError } from '../errors.js';

/** Host TSC frequency in kHz, read from the host (never hard-coded). */
export function hostTscKHz(): number {
  try {
    const dmesg = execFileSync('dmesg', [], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const m =
      /tsc: Detected ([0-9.]+) MHz/.exec(dmesg) ??
      /tsc: Refined TSC clocksource calibration: ([0-9.]+) MHz/.exec(dmesg);
    if (m?.[1]) return Math.round(Number(m[1]) * 1000);
  } catch {
    /* dmesg may be restricted */
  }
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const m = /^cpu MHz\s*:\s*([0-9.]+)/m.exec(cpuinfo);
  if (m?.[1]) return Math.round(Number(m[1]) * 1000);
  throw new SandboxError('host.tsc-unknown', 'cannot determine the host TSC frequency', {
    hint: 'neither dmesg nor /proc/cpuinfo shows it; pass tscKHz in the driver options',
  });
}

/** True if the CPU exposes hardware virtualisation (VMX/SVM) and /dev/kvm is usable. */
export function hostHasHardwareKvm(): boolean {
  try {
    const flags = /^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? '';
    if (!/\b(vmx|svm)\b/.test(flags)) return false;
    accessSync('/dev/kvm', constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

export function qemuVersion(binary: string): string {
  try {
    return execFileSync(binary, ['--version'], { encoding: 'utf8' }).split('\n')[0]?.trim() ?? '';
  } catch (err) {
    throw new SandboxError('host.qemu-missing', `cannot run ${binary}`, {
      cause: err,
      hint: 'install the Debian package qemu-system-x86 (scripts/bootstrap.sh does this)',
    });
  }
}

/** An unprivileged user for QEMU to drop to (only meaningful when we run as root). */
export function unprivilegedUser(): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const passwd = readFileSync('/etc/passwd', 'utf8');
    for (const u of ['sandbox-vm', 'nobody']) if (new RegExp(`^${u}:`, 'm').test(passwd)) return u;
  } catch {
    /* none */
  }
  return undefined;
}
