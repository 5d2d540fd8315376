/**
 * sandbox-operator's Events: the recorder lives in src/kube/events.ts (sandbox-apiserver's verbs and sandboxd's claim
 * gateway record through it too); this names the operator as the reporting controller.
 */
import type { Registry } from 'prom-client';
import { EventRecorder, type KubeClient } from '../kube/index.js';
import type { Logger } from '../log/logger.js';

export { eventName, microTime, EventRecorder, type EventSpec } from '../kube/index.js';

export const REPORTING_CONTROLLER = 'sandbox-operator';

/** The operator's recorder (every controller makes its own; they share the one metric of the registry). */
export function operatorEventRecorder(client: KubeClient, log: Logger, registry?: Registry): EventRecorder {
  return new EventRecorder(client, log, { controller: REPORTING_CONTROLLER, registry });
}
