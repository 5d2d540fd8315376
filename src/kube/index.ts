export { KubeClient, resetClientMetricsCache } from './client.js';
export type {
  ClientOptions,
  PatchType,
  ListOptions,
  WatchOptions,
  WatchEvent,
  KubeList,
  WriteOptions,
  CallOptions,
  DeleteOptions,
} from './client.js';
export { Informer } from './informer.js';
export type { EventHandler, InformerOptions } from './informer.js';
export { WorkQueue } from './workqueue.js';
export { Controller, TerminalError } from './controller.js';
export type { Reconciler, ReconcileRequest, ReconcileResult, ReconcileContext, Predicate } from './controller.js';
export { Manager, splitHostPort } from './manager.js';
export type { ManagerOptions, Runnable } from './manager.js';
export { LeaderElector } from './leader-election.js';
export type { Lease, LeaderElectionOptions } from './leader-election.js';
export { mergePatch, applyMergePatch } from './merge-patch.js';
export { ExpiringCache } from './expiring-cache.js';
export type { ExpiringCacheOptions } from './expiring-cache.js';
export { AccessReviewer, reviewSubject, TokenReviewer } from './reviews.js';
export type {
  AccessDecision,
  AccessReviewerOptions,
  ReviewedUser,
  SubjectAccessReviewSpec,
  TokenReviewerOptions,
  TokenVerdict,
} from './reviews.js';
export { controllerRef, controllerOf, isControlledBy, refGroup } from './ownership.js';
export {
  StatusError,
  isNotFound,
  isAlreadyExists,
  isConflict,
  isInvalid,
  isGone,
  isForbidden,
} from './status-errors.js';
export type { KubeStatus } from './status-errors.js';
export { failureStatus } from './status-errors.js';
export * from './resource.js';
export * from './api-resources.js';
export { EventRecorder, eventName, microTime } from './events.js';
export type { EventRecorderOptions, EventRegarding, EventSpec } from './events.js';
