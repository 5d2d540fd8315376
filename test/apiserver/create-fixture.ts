/**
 * A SandboxCreator with no fleet or nodes behind it, and the dry-run create request its validation tests send: for
 * the tests of what `validate` accepts and refuses (metadata rules, server-written keys).
 */
import { SandboxCreator, type CreateRequest } from '../../src/apiserver/sandboxes/create.js';
import { EventLog } from '../../src/apiserver/sandboxes/event-log.js';
import type { Fleet } from '../../src/apiserver/sandboxes/fleet.js';
import type { SandboxdClient } from '../../src/apiserver/sandboxes/sandboxd-client.js';
import { SandboxStore } from '../../src/apiserver/sandboxes/store.js';
import { silentLogger } from '../../src/log/logger.js';

export const validationCreator = (): SandboxCreator =>
  new SandboxCreator(
    new SandboxStore(silentLogger, new EventLog(8)),
    {} as Fleet,
    {} as SandboxdClient,
    { phase: () => 'active' },
    silentLogger,
  );

/** A dry-run create of a minimal Sandbox in namespace `ns` with `metadata`. */
export const createRequest = (
  metadata: Record<string, unknown>,
  extra: Partial<CreateRequest> = {},
): CreateRequest => ({
  namespace: 'ns',
  body: {
    apiVersion: 'agents.x-k8s.io/v1beta1',
    kind: 'Sandbox',
    metadata,
    spec: { podTemplate: { spec: { containers: [{ name: 'c', image: 'sandbox/minimal' }] } } },
  },
  dryRun: true,
  fieldValidation: 'Strict',
  warnings: [],
  ...extra,
});
