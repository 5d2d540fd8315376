/**
 * sandboxd's lifecycle routes (docs/sandboxd-api.md "Sandboxes"): pause and resume in the mode the node chooses,
 * the egress policy (`PUT .../network`), and fork into children that may carry their own Kubernetes objects (a
 * claim from a checkpoint, which may carry one too, is placement/routes.ts). Each answer includes the rows of the
 * sandboxes it changed or made, so a caller (sandbox-apiserver) indexes the result without waiting for the change
 * feed.
 */
import { SandboxError } from '../errors.js';
import type { ForkChild, NodeEngine, SandboxRecord } from './engine.js';
import { sandboxRow } from './change-feed.js';
import { assertMayGiveObjects, type Principal } from './auth.js';
import { updatedPolicy } from './network-policy.js';
import {
  claimResponse,
  json,
  optionalInt,
  optionalString,
  readJson,
  storedObject,
  type SandboxdApi,
} from './http-api.js';

export type PauseMode = 'memory' | 'hibernate';

/** A claim answer with the sandbox's row (also the checkpoint claim's, placement/routes.ts). */
export function claimAnswer(rec: SandboxRecord, ownerAddr: string) {
  return { ...claimResponse(rec, ownerAddr), sandbox: sandboxRow(rec) };
}

export function registerLifecycleRoutes(api: SandboxdApi, e: NodeEngine, pauseMode: PauseMode = 'memory'): void {
  // `{mode: "filesystem"}` keeps the files only (files-pause.ts: the VM is destroyed, resume reboots with them);
  // without a body, or `{mode: "default"}`, the node's mode (--pause-mode). A files-only sandbox stays as it is.
  api.route('POST', '/v1/sandboxes/{id}/pause', async (q, res, who, [id]) => {
    const rec = api.authorizedSandbox(who, id!);
    const asked = optionalString((await readJson(q)).mode, 'mode') ?? 'default';
    if (asked !== 'default' && asked !== 'filesystem')
      throw new SandboxError('sandboxd.bad-request', `mode: must be default or filesystem (got "${asked}")`);
    if (asked === 'filesystem') await e.pauseFiles(rec.id);
    else await (pauseMode === 'hibernate' ? e.hibernate(rec.id) : e.pause(rec.id));
    const mode = rec.filesOnly ? 'filesystem' : pauseMode;
    json(res, 200, { mode, sandbox: sandboxRow(rec) });
  });

  api.route('POST', '/v1/sandboxes/{id}/resume', async (_q, res, who, [id]) => {
    const rec = api.authorizedSandbox(who, id!);
    await e.resume(rec.id);
    json(res, 200, { sandbox: sandboxRow(rec) });
  });

  // The egress policy, live (network-policy.ts has the body's rules). A paused or hibernated sandbox takes it too: the
  // VM layer enforces the recorded policy again when its VM runs again.
  api.route('PUT', '/v1/sandboxes/{id}/network', async (req, res, who, [id]) => {
    const rec = api.authorizedSandbox(who, id!);
    const body = await readJson(req);
    const updated = await e.setNetworkPolicy(rec.id, (current) => updatedPolicy(current, body, who));
    json(res, 200, { sandbox: sandboxRow(updated) });
  });

  api.route('POST', '/v1/sandboxes/{id}/fork', async (req, res, who, [id]) => {
    const body = await readJson(req);
    const rec = api.authorizedSandbox(who, id!, optionalString(body.token, 'token'));
    const count = optionalInt(body.count, 'count', 1) ?? 1;
    const ttl = optionalInt(body.ttl_seconds, 'ttl_seconds', 0);
    const objects = body.objects === undefined ? undefined : forkObjects(who, rec, body.objects);
    await e.idle.ensureAwake(rec.id);
    const children = await e.fork(rec.id, count, ttl, objects);
    json(res, 200, { children: children.map((c) => claimAnswer(c, e.advertiseAddr)) });
  });
}

/**
 * A fork's `objects`: from the fleet's root only (a sandbox token could otherwise place children, with their
 * Kubernetes identity, in any namespace), and in the parent's namespace: a fork copies a sandbox, it never moves
 * one to another tenant's namespace.
 */
function forkObjects(who: Principal, parent: SandboxRecord, raw: unknown): ForkChild[] {
  assertMayGiveObjects(who, 'objects');
  if (!Array.isArray(raw)) throw new SandboxError('sandboxd.bad-request', 'objects: must be an array');
  const namespace = (parent.object as { metadata?: { namespace?: unknown } } | undefined)?.metadata?.namespace;
  if (typeof namespace !== 'string')
    throw new SandboxError(
      'sandboxd.bad-request',
      `objects: sandbox ${parent.id} has no Kubernetes object, so its children cannot have one; fork without objects`,
    );
  return raw.map((o: unknown, i: number) => {
    const claimRef = (o as { claim_ref?: unknown })?.claim_ref;
    if (typeof claimRef !== 'string')
      throw new SandboxError('sandboxd.bad-request', `objects[${i}].claim_ref: required`);
    const object = storedObject((o as { object?: unknown }).object, claimRef) as
      { metadata: { namespace: string } } | undefined;
    if (!object) throw new SandboxError('sandboxd.bad-request', `objects[${i}].object: required`);
    if (object.metadata.namespace !== namespace)
      throw new SandboxError(
        'sandboxd.bad-request',
        `objects[${i}].object: metadata.namespace must be the parent's ("${namespace}"): a fork's children stay in its namespace`,
      );
    return { claimRef, object };
  });
}
