/**
 * The e2b API's sandbox verbs as operations on ordinary sandboxes of the aggregated API (one namespace,
 * `--e2b-namespace`): create is the same node-local claim `kubectl create` makes (src/apiserver/sandboxes/create.ts),
 * kill the same release; timeout, pause, connect (resume), metrics and snapshots call the owning node's sandboxd
 * through the apiserver's SandboxdClient, and the node's answer is applied to the store at once, so the next read
 * of either API sees it.
 */
import { labelValueProblem, qualifiedNameProblem } from '../../api/claim-injection.js';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  CocoonAnnotationKeys,
  E2B_PUBLIC_TRAFFIC_ANNOTATION,
  isServerWrittenSandboxKey,
  withoutServerWrittenKeys,
} from '../../api/keys.js';
import { envdAccessToken } from '../../api/envd.js';
import { kubeTime } from '../../api/index.js';
import type { Logger } from '../../log/logger.js';
import type { Fleet } from '../sandboxes/fleet.js';
import { SLOW_VERB_TIMEOUT_MS } from '../sandboxes/actions.js';
import type { NodeRow, SandboxEntry } from '../sandboxes/entry.js';
import { NodeHttpError, NodeUnreachableError, type SandboxdClient } from '../sandboxes/sandboxd-client.js';
import type { SandboxStorage } from '../sandboxes/storage.js';
import type { SandboxStore } from '../sandboxes/store.js';
import { StatusFailure } from '../status.js';
import { badRequest, E2bError, notFound, optionalBool, optionalInt, stringMap } from './http.js';
import type { PoolNet } from '../../api/pool-key.js';
import { createNetworkOptions, tenantLayerFor, updateNetworkOptions } from './network.js';
import { findSnapshot } from './queries.js';
import type { TemplateAlias } from './templates.js';
import { E2B_ANNOTATIONS, stateOf } from './views.js';

/** The longest lease a node grants (a paused sandbox is kept this long). */
export const MAX_TIMEOUT_SECONDS = 86_400;
export const DEFAULT_TIMEOUT_SECONDS = 300;

const ID_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** e2b-style ids (`i` + 19 characters), DNS labels, so `<port>-<id>.<domain>` is a valid host. */
export function newSandboxId(): string {
  let s = 'i';
  for (const b of randomBytes(19)) s += ID_CHARS[b % ID_CHARS.length];
  return s;
}

/** Metadata entries that are valid labels become labels too (`kubectl get sandboxes -l owner=me`). */
function metadataLabels(metadata: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata))
    if (
      !qualifiedNameProblem(k) &&
      !labelValueProblem(k, v) &&
      !k.includes('cocoonstack.io') &&
      !isServerWrittenSandboxKey('labels', k)
    )
      out[k] = v;
  return out;
}

export interface OpsDeps {
  storage: SandboxStorage;
  fleet: Fleet;
  store: SandboxStore;
  client: SandboxdClient;
  templates: ReadonlyMap<string, TemplateAlias>;
  namespace: string;
  log: Logger;
}

/**
 * A node call's failure as an e2b error (the node's own 404 is the sandbox being gone; its 400, 403 and 413, a bad
 * name, a checkpoint quota or files over the filesystem pause's cap, are the caller's). A 5xx's message is the incident id only (sandboxd-client.ts).
 */
function nodeFailure(err: unknown, id: string): E2bError {
  if (err instanceof E2bError) return err;
  if (err instanceof NodeHttpError) {
    // 413: a filesystem pause whose files are over the node's cap (the sandbox runs on; the message says so).
    if (err.status === 400 || err.status === 403 || err.status === 413) return new E2bError(err.status, err.message);
    if (err.status === 404) return notFound(id);
    if (err.status === 409) return new E2bError(409, err.message);
    if (err.status === 429) return new E2bError(429, err.message, { 'retry-after': '1' });
    return new E2bError(500, err.message);
  }
  if (err instanceof NodeUnreachableError) return new E2bError(502, `${err.message}; retry`);
  return new E2bError(500, (err as Error).message);
}

export class SandboxOps {
  constructor(private readonly d: OpsDeps) {}

  entry(id: string): SandboxEntry {
    const e = id ? this.d.store.get(`${this.d.namespace}/${id}`) : undefined;
    if (!e) throw notFound(id);
    return e;
  }

  /** The node's current row and token for a sandbox; the row refreshes the store (read-your-writes). */
  async refresh(e: SandboxEntry): Promise<{ entry: SandboxEntry; envdToken: string }> {
    const row = (await this.d.client
      .call(e.node, e.address, 'GET', `/v1/sandboxes/${encodeURIComponent(e.claimId)}`)
      .catch((err: unknown) => {
        throw nodeFailure(err, e.name);
      })) as NodeRow & { token: string };
    const entry = this.d.store.upsert(e.node, e.address, row) ?? e;
    return { entry, envdToken: envdAccessToken(row.token) };
  }

  async create(body: Record<string, unknown>): Promise<{ entry: SandboxEntry; envdToken: string }> {
    const templateId = body.templateID;
    if (typeof templateId !== 'string' || !templateId) throw badRequest('templateID: required');
    // A template of the alias table, else a snapshot of this namespace (e2b's snapshots are templates).
    const alias = this.d.templates.get(templateId);
    const snapshot = alias
      ? undefined
      : await findSnapshot(this.d.fleet, this.d.client, this.d.store, this.d.namespace, templateId);
    const pool = alias ?? snapshot?.ck.key;
    if (!pool)
      throw new E2bError(
        404,
        `template "${templateId}" not found: neither a template this server serves (${[...this.d.templates.keys()].join(', ')}) nor a snapshot of this namespace`,
      );
    const timeout = optionalInt(body.timeout, 'timeout', 0, MAX_TIMEOUT_SECONDS) || DEFAULT_TIMEOUT_SECONDS;
    const metadata = stringMap(body.metadata, 'metadata');
    const envVars = stringMap(body.envVars, 'envVars');
    const autoPause = optionalBool(body.autoPause, 'autoPause') ?? false;
    // onTimeout {action: 'pause', keepMemory: false}: a filesystem-only pause at the lease's end (the node's
    // `pause-filesystem` on-expiry; sandboxd's files-pause.ts), resumed by connect, which reboots it with its files.
    const filesOnly = autoPause && optionalBool(body.autoPauseMemory, 'autoPauseMemory') === false;
    const internet = optionalBool(body.allow_internet_access, 'allow_internet_access');
    const { publicTraffic, egress } = createNetworkOptions(body.network, internet);
    for (const f of ['mcp', 'volumeMounts', 'iam'] as const) {
      const v = body[f];
      if (v !== undefined && v !== null && !(typeof v === 'object' && Object.keys(v).length === 0))
        throw badRequest(`${f}: not supported by this server`);
    }
    const autoResume = autoResumeOption(body.autoResume);
    // As e2b's SDKs refuse it: a reboot is asked for by connect, never set off by a request's traffic.
    if (filesOnly && autoResume)
      throw badRequest('autoResume: not with autoPauseMemory: false (a filesystem-only pause is resumed by connect)');
    // The lane is the template's (a snapshot's: the sandbox's it was taken of); the options are its tenant layer.
    const net: PoolNet = pool.net === 'egress' ? 'egress' : 'none';
    const tenant = tenantLayerFor(net, egress);
    for (let attempt = 0; ; attempt++) {
      const name = newSandboxId();
      const object = {
        apiVersion: 'agents.x-k8s.io/v1beta1',
        kind: 'Sandbox',
        metadata: {
          name,
          labels: metadataLabels(metadata),
          annotations: {
            [E2B_ANNOTATIONS.templateId]: templateId,
            [E2B_ANNOTATIONS.metadata]: JSON.stringify(metadata),
            [CocoonAnnotationKeys.ttlSeconds]: String(timeout),
            [CocoonAnnotationKeys.size]: pool.size,
            [CocoonAnnotationKeys.net]: net,
            ...(snapshot ? { [CocoonAnnotationKeys.snapshot]: snapshot.ck.id } : {}),
            ...(autoPause ? { [CocoonAnnotationKeys.onExpiry]: filesOnly ? 'pause-filesystem' : 'hibernate' } : {}),
            ...(autoResume ? { [E2B_ANNOTATIONS.autoResume]: 'true' } : {}),
            // The template's idle policy (the alias table's): suspended when idle, woken by its next request.
            ...(alias?.idleHibernateSeconds
              ? { [CocoonAnnotationKeys.idleHibernateSeconds]: String(alias.idleHibernateSeconds) }
              : {}),
            ...(publicTraffic ? { [E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' } : {}),
          },
        },
        spec: {
          podTemplate: {
            spec: {
              containers: [
                {
                  name: 'sandbox',
                  image: pool.template,
                  ...(Object.keys(envVars).length
                    ? { env: Object.entries(envVars).map(([k, v]) => ({ name: k, value: v })) }
                    : {}),
                },
              ],
            },
          },
        },
      };
      try {
        const created = await this.d.storage.create({
          namespace: this.d.namespace,
          body: object,
          dryRun: false,
          fieldValidation: 'Strict',
          warnings: [],
          ...(snapshot ? { snapshotHolder: snapshot } : {}),
          serverKeys: [E2B_PUBLIC_TRAFFIC_ANNOTATION],
          // A pool run dry, or one no node keeps warm, is a clone (or boot) on a node, not a 503 the JS SDK would
          // not retry (docs/e2b.md "Capacity").
          provisionOnMiss: true,
          // null: no tenant layer, also on a clone of a snapshot whose sandbox had one (a create says it whole).
          ...(net === 'egress' ? { network: { tenant: tenant ?? null } } : {}),
        });
        const token = created.object.metadata?.annotations?.[CocoonAnnotationKeys.token];
        if (!created.entry || !token)
          throw new E2bError(500, 'the claim answered without the sandbox', { 'should-retry': 'false' });
        return { entry: created.entry, envdToken: envdAccessToken(token) };
      } catch (err) {
        if (err instanceof StatusFailure && err.status.code === 409 && attempt < 3) continue;
        throw createFailure(err);
      }
    }
  }

  async kill(id: string): Promise<void> {
    try {
      await this.d.storage.delete(this.d.namespace, this.entry(id).name, { dryRun: false });
    } catch (err) {
      if (err instanceof StatusFailure) {
        if (err.status.code === 404) throw notFound(id);
        throw new E2bError(err.status.code, err.status.message, err.headers);
      }
      throw err;
    }
  }

  /** Move the lease to `seconds` from now (sandboxd renew); 0 ends it now, so there is nothing left to read back. */
  async setTimeout(e: SandboxEntry, seconds: number): Promise<SandboxEntry> {
    await this.d.client
      .call(e.node, e.address, 'POST', `/v1/sandboxes/${encodeURIComponent(e.claimId)}/renew`, { ttl_seconds: seconds })
      .catch((err: unknown) => {
        throw nodeFailure(err, e.name);
      });
    if (seconds === 0) return e;
    return (await this.refresh(e)).entry;
  }

  /**
   * Pause: the node's pause (the subresource's too: memory-resident or hibernation, as the node is configured), or
   * with `filesystem` its files only (`memory: false`: the VM is gone, resume reboots it with them); kept for the
   * longest lease while paused. 409 when already paused.
   */
  async pause(id: string, mode: 'default' | 'filesystem' = 'default'): Promise<void> {
    const e = (await this.refresh(this.entry(id))).entry;
    if (stateOf(e) === 'paused') throw new E2bError(409, `sandbox "${id}" is already paused`);
    await this.verb(e, 'pause', mode === 'filesystem' ? { mode } : undefined);
    await this.setTimeout(e, MAX_TIMEOUT_SECONDS);
  }

  /**
   * Connect: resume a paused sandbox (true) or find it running (false); the lease is at least `seconds` then.
   * `reboot` (onResume 'reboot', `memory: false`): a sandbox paused with its memory resumes from its files only.
   */
  async connect(
    id: string,
    seconds: number | undefined,
    reboot = false,
  ): Promise<{ resumed: boolean; entry: SandboxEntry; envdToken: string }> {
    const current = this.entry(id);
    if (current.hibernationCheckpoint && !this.d.store.nodeAvailable(current.node)) {
      // Its node is gone: it resumes on a node holding a copy of its hibernation record (docs/placement.md "Resume
      // anywhere"), as the Sandbox's resume verb does (the same code, the same Event). Its envd token is the new
      // node's, which this answer carries.
      await this.resumeVerb(id);
      const moved = await this.setTimeout(this.entry(id), seconds || DEFAULT_TIMEOUT_SECONDS);
      return { resumed: true, ...(await this.refresh(moved)) };
    }
    let { entry } = await this.refresh(current);
    const resumed = stateOf(entry) === 'paused';
    if (resumed) {
      if (reboot && entry.pauseMode !== 'filesystem') await this.verb(entry, 'pause', { mode: 'filesystem' });
      // A hibernated sandbox whose node is draining or full resumes elsewhere too: the resume verb decides.
      if (entry.hibernationCheckpoint && !reboot) {
        await this.resumeVerb(id);
        entry = this.entry(id);
      } else await this.verb(entry, 'resume');
      entry = await this.setTimeout(entry, seconds || DEFAULT_TIMEOUT_SECONDS);
    } else if (seconds && Date.parse(entry.deadline) < Date.now() + seconds * 1000) {
      entry = await this.setTimeout(entry, seconds);
    }
    const fresh = await this.refresh(entry);
    return { resumed, ...fresh };
  }

  /** The Sandbox's resume verb, as the e2b API's own caller; its Status failure as e2b's `{code, message}`. */
  private async resumeVerb(id: string): Promise<void> {
    try {
      await this.d.storage.act(this.d.namespace, id, 'resume', {}, [], 'e2b-api');
    } catch (err) {
      if (err instanceof StatusFailure) throw new E2bError(err.status.code, err.status.message);
      throw err;
    }
  }

  async metrics(id: string): Promise<Record<string, unknown>> {
    const e = this.entry(id);
    return (await this.d.client
      .call(e.node, e.address, 'GET', `/v1/sandboxes/${encodeURIComponent(e.claimId)}/metrics`)
      .catch((err: unknown) => {
        throw nodeFailure(err, id);
      })) as Record<string, unknown>;
  }

  async snapshot(id: string, name: string | undefined): Promise<{ id: string; name?: string }> {
    const e = this.entry(id);
    const r = (await this.d.client
      .call(
        e.node,
        e.address,
        'POST',
        `/v1/sandboxes/${encodeURIComponent(e.claimId)}/checkpoint`,
        name ? { name } : {},
        SLOW_VERB_TIMEOUT_MS,
      )
      .catch((err: unknown) => {
        throw nodeFailure(err, id);
      })) as { checkpoint: { id: string; name?: string } };
    return r.checkpoint;
  }

  /**
   * Fork a running sandbox into `count` children, each an ordinary sandbox of this namespace (a copy of the
   * parent's object under a new name; the node forks the VM with its memory). All or nothing, as on the node.
   */
  async fork(id: string, count: number, seconds: number): Promise<Array<{ entry: SandboxEntry; envdToken: string }>> {
    const parent = (await this.refresh(this.entry(id))).entry;
    if (stateOf(parent) === 'paused') throw new E2bError(409, `sandbox "${id}" is paused; resume it first`);
    const now = kubeTime();
    const objects = Array.from({ length: count }, () => {
      const name = newSandboxId();
      const m = parent.object.metadata;
      return {
        claim_ref: `${this.d.namespace}/${name}`,
        object: {
          metadata: {
            name,
            namespace: this.d.namespace,
            uid: randomUUID(),
            creationTimestamp: now,
            // the parent's own keys, not what servers wrote on it (as the aggregated API's fork, actions.ts)
            labels: withoutServerWrittenKeys('labels', m.labels),
            annotations: {
              ...withoutServerWrittenKeys('annotations', m.annotations),
              [CocoonAnnotationKeys.ttlSeconds]: String(seconds),
              // a child takes its parent's public-traffic choice, made through this API
              ...(m.annotations?.[E2B_PUBLIC_TRAFFIC_ANNOTATION] === 'true'
                ? { [E2B_PUBLIC_TRAFFIC_ANNOTATION]: 'true' }
                : {}),
            },
          },
          spec: parent.object.spec,
        },
      };
    });
    const r = (await this.d.client
      .call(
        parent.node,
        parent.address,
        'POST',
        `/v1/sandboxes/${encodeURIComponent(parent.claimId)}/fork`,
        { count, ttl_seconds: seconds, objects },
        SLOW_VERB_TIMEOUT_MS,
      )
      .catch((err: unknown) => {
        throw nodeFailure(err, id);
      })) as { children: Array<{ token: string; sandbox: NodeRow }> };
    return r.children.map((c) => {
      const entry = this.d.store.upsert(parent.node, parent.address, c.sandbox);
      if (!entry) throw new E2bError(500, `node ${parent.node} answered the fork without the children's identity`);
      return { entry, envdToken: envdAccessToken(c.token) };
    });
  }

  /**
   * updateNetwork: the options replace the sandbox's tenant layer, live, on its node (which keeps the platform's
   * template layer). On a NIC-less sandbox (net=none) there is nothing to narrow: accepted, as on create.
   */
  async updateNetwork(id: string, body: Record<string, unknown>): Promise<void> {
    const options = updateNetworkOptions(body);
    const e = this.entry(id);
    if (e.pool.net !== 'egress') return;
    const out = (await this.d.client
      .call(e.node, e.address, 'PUT', `/v1/sandboxes/${encodeURIComponent(e.claimId)}/network`, {
        tenant: tenantLayerFor(e.pool.net, options) ?? null,
      })
      .catch((err: unknown) => {
        throw nodeFailure(err, id);
      })) as { sandbox?: NodeRow };
    if (out.sandbox) this.d.store.upsert(e.node, e.address, out.sandbox);
  }

  /** The node answers pause and resume with the row, applied at once (both APIs read the new phase). */
  private async verb(e: SandboxEntry, verb: 'pause' | 'resume', body?: { mode: 'filesystem' }): Promise<void> {
    const out = (await this.d.client
      .call(e.node, e.address, 'POST', `/v1/sandboxes/${encodeURIComponent(e.claimId)}/${verb}`, body)
      .catch((err: unknown) => {
        throw nodeFailure(err, e.name);
      })) as { sandbox?: NodeRow };
    if (out.sandbox) this.d.store.upsert(e.node, e.address, out.sandbox);
  }
}

/**
 * `autoResume: {enabled}` as the SDKs send it (JS `lifecycle.autoResume`, Python `lifecycle["auto_resume"]`); absent
 * or null is off. Accepted with or without autoPause: a sandbox paused by `pause` resumes on a request too (the SDKs
 * refuse it without `onTimeout: 'pause'` themselves).
 */
function autoResumeOption(v: unknown): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest('autoResume: must be an object {enabled: boolean}');
  const enabled = (v as { enabled?: unknown }).enabled;
  if (typeof enabled !== 'boolean') throw badRequest('autoResume.enabled: must be a boolean');
  return enabled;
}

/**
 * A create's failure: no warm capacity is a 503 with Retry-After (a retry claims at most once: nothing was
 * claimed); anything after a claim may have been made says Should-Retry: false, so Python's retry loop cannot
 * claim a second VM.
 */
function createFailure(err: unknown): E2bError {
  if (err instanceof E2bError) return err;
  if (err instanceof StatusFailure) {
    const s = err.status;
    if (s.code === 503) return new E2bError(503, s.message, { 'retry-after': err.headers['retry-after'] ?? '1' });
    if (s.code === 422 || s.code === 400) return new E2bError(400, s.message);
    if (s.code === 404)
      return new E2bError(500, `${s.message}: the e2b namespace must exist`, { 'should-retry': 'false' });
    return new E2bError(s.code >= 500 ? s.code : 500, s.message, { 'should-retry': 'false' });
  }
  return new E2bError(500, (err as Error).message, { 'should-retry': 'false' });
}
