/**
 * Public surface of src/vmm: the QEMU microvm driver, VM handles and their state machine.
 * No Kubernetes imports; src/guest provides the agent client and the image builds.
 */
export { QemuMicrovmDriver } from './qemu-driver.js';
export { engineKind } from './driver.js';
export type { EngineKind, MicrovmDriver, MicrovmHandle, SimulationInfo } from './driver.js';
export { SIM_CLONE_MS, SIMULATION_NOTE, SimulatedMicrovmDriver } from './sim-driver.js';
export { Vm } from './vm.js';
export { QmpClient } from './qmp.js';
export type { QmpEvent } from './qmp.js';
export { liveQemuPids, pidAlive } from './process.js';
export { hostHasHardwareKvm, hostTscKHz } from './host.js';
export { DEFAULT_VM_NETWORK_CIDR, resolveDriverOptions } from './options.js';
export type { QemuDriverOptions, ResolvedDriverOptions } from './options.js';
export { ALLOWED_ACTIONS, assertAllowed } from './types.js';
export type {
  Accel,
  CloneOptions,
  GuestImage,
  NetworkLane,
  Template,
  TemplateSpec,
  VmAction,
  VmRecord,
  VmState,
  VmStats,
} from './types.js';
export { templateFromImage, ensureTemplate } from './templates.js';
