/**
 * Public surface of src/guest: the host side of the agent protocol and the guest image builds.
 * Imports nothing of ours except errors and logging.
 */
export { AgentClient } from './agent-client.js';
export type { AgentConnectOptions, AgentHealth, AgentInfo } from './agent-client.js';
export { ExecProcess } from './agent-exec.js';
export type { ExecOptions, ExecResult } from './agent-exec.js';
export { AgentFiles } from './agent-files.js';
export type { FileStat, WatchEvent } from './agent-files.js';
export {
  FrameDecoder,
  FrameType,
  encodeExecPayload,
  encodeFrame,
  HOST_MAGIC,
  AGENT_MAGIC,
  MAX_PAYLOAD,
  MAX_JSON,
  PROTOCOL_VERSION,
} from './protocol.js';
export type { ExecRequestArgs, Frame } from './protocol.js';
export { cachedArtifact, contentHash, guestCacheRoot, silentProgress, stderrProgress } from './build/cache.js';
export type { Progress } from './build/cache.js';
export { ensureKernel, kernelHash } from './build/kernel.js';
export type { KernelArtifact } from './build/kernel.js';
export { ensureAgent } from './build/agent.js';
export { ensureInitramfs } from './build/initramfs.js';
export { ensureGuestImage, GUEST_TEMPLATES, listGuestTemplates, primeCommand } from './images.js';
export type { GuestImageArtifact, GuestTemplateDef } from './images.js';
