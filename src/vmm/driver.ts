/**
 * What sandboxd's engine needs of a VMM driver, so the same pool, claim, release, fork and checkpoint logic runs on
 * real QEMU microVMs (QemuMicrovmDriver) or on a simulation of them (SimulatedMicrovmDriver, `sandboxd
 * --engine=sim`, for fleet-scale benchmarks this machine cannot boot).
 */
import type { CloneOptions, NetworkLane, Template, TemplateSpec, VmRecord } from './types.js';
import type { Progress } from '../guest/index.js';
import type { Vm } from './vm.js';

/** Which engine a driver is: real microVMs, or records that only simulate them. */
export type EngineKind = 'qemu' | 'sim';

/** What a simulated driver says about itself (the node reports it in /v1/info, metrics and NodeInventory). */
export interface SimulationInfo {
  note: string;
  cloneMs: number;
}

/** `sim` when the driver is a simulation. */
export function engineKind(driver: Pick<MicrovmDriver, 'simulation'>): EngineKind {
  return driver.simulation ? 'sim' : 'qemu';
}

/** One VM as the engine and the node's APIs use it (a Vm, or a simulated one with the same surface). */
export type MicrovmHandle = Pick<
  Vm,
  | 'id'
  | 'state'
  | 'pid'
  | 'record'
  | 'agent'
  | 'files'
  | 'exec'
  | 'run'
  | 'connectTcp'
  | 'pause'
  | 'resume'
  | 'hibernate'
  | 'restore'
  | 'checkpoint'
  | 'destroy'
  | 'stats'
  | 'setNetworkPolicy'
> & {
  fork(n: number, opts?: Omit<CloneOptions, 'id'>): Promise<MicrovmHandle[]>;
};

export interface MicrovmDriver {
  /** Set only on a simulation; absent on the real driver. */
  readonly simulation?: SimulationInfo;
  createTemplate(spec: TemplateSpec, opts?: { progress?: Progress; bootTimeoutMs?: number }): Promise<Template>;
  loadTemplate(dir: string): Template;
  /** The kernel command line a template of this image and lane boots with (a healed checkpoint records it). */
  kernelCmdline(spec: { image: Template['image']; network: NetworkLane }, accel: 'kvm' | 'tcg'): string;
  deleteTemplate(t: Template): void;
  clone(template: Template, opts?: CloneOptions): Promise<MicrovmHandle>;
  get(id: string): MicrovmHandle | undefined;
  /** The VMs this driver object manages (spare VMMs not included). */
  running(): MicrovmHandle[];
  /** VMs an earlier process left (run records), with liveness checked. */
  list(): (VmRecord & { alive: boolean })[];
  adopt(id: string): Promise<MicrovmHandle>;
  removeStale(id: string): void;
  killRecorded(rec: VmRecord & { alive: boolean }): Promise<boolean>;
  reapOrphanSpares(): Promise<number>;
  destroyAll(): Promise<void>;
  close(): Promise<void>;
}
