import type { ServerResponse } from 'node:http';
import { Counter, type Registry } from 'prom-client';
import { SandboxError } from '../../errors.js';
import type { Logger } from '../../log/logger.js';
import type { CheckpointRecord, NodeEngine } from '../engine.js';
import {
  json,
  idleSecondsOf,
  onExpiryOf,
  optionalInt,
  optionalString,
  readJson,
  requireOperator,
  storedObject,
  type SandboxdApi,
} from '../http-api.js';
import { claimAnswer } from '../lifecycle-routes.js';
import type { VmNetworkPolicy } from '../../api/vm-network.js';
import { updatedPolicy } from '../network-policy.js';
import { packRecord } from './blob.js';
import type { Healer } from './heal.js';
import type { OwnerDirectory } from './owners.js';
import type { Replicator } from './replicate.js';
import type { PeerClient } from './peer-client.js';
import { CHECKPOINT_ID, contentDigest, META_FORMAT, type RecordMeta } from './record.js';

/**
 * The checkpoint routes (docs/placement.md), registered by SandboxdApi: list, delete (and tell the peers),
 * claim with its three tiers (local hit, redirect to owners, peer heal), the record stream peers pull, and promote.
 * Without `peers` (a node on its own) a claim is served from the local store or is a 404.
 */
export interface PlacementOptions {
  /** Finds the peers that hold a checkpoint (owner probes). */
  owners?: OwnerDirectory;
  /** Present when --checkpoint-peer-heal is on. */
  healer?: Healer;
  /** Pulls the copies peers ask this node to keep (POST .../replicate); present when --checkpoint-replicas > 1. */
  puller?: Healer;
  /** This node's view of where its checkpoints' copies are (GET /v1/checkpoints `copies`). */
  replicator?: Replicator;
  /** For forwarded deletes. */
  client?: PeerClient;
  peers?: () => string[];
  /** Retry-After of a 503 when the node's heal slots are full. Default 2 s. */
  retryAfterSeconds?: number;
}

/** Which tier answered a checkpoint claim, in the `x-sandboxd-checkpoint-tier` header and the metrics. */
export type ClaimTier = 'local' | 'redirect' | 'heal';

export function registerCheckpointRoutes(
  api: SandboxdApi,
  engine: NodeEngine,
  registry: Registry,
  log: Logger,
  p: PlacementOptions = {},
): void {
  const r = [registry];
  const claims = new Counter({
    name: 'sandboxd_checkpoint_claims_total',
    help: 'Checkpoint claims by the tier that answered (local|redirect|heal|miss)',
    labelNames: ['tier'],
    registers: r,
  });
  const heals = new Counter({
    name: 'sandboxd_checkpoint_heals_total',
    help: 'Checkpoint pulls from peers by result (ok|failed|busy)',
    labelNames: ['result'],
    registers: r,
  });
  const served = new Counter({
    name: 'sandboxd_checkpoint_blob_bytes_total',
    help: 'Bytes of checkpoint records served to peers',
    registers: r,
  });
  new Counter({
    name: 'sandboxd_checkpoints_expired_total',
    help: 'Checkpoints deleted by this node because they outlived --checkpoint-ttl-hours',
    registers: r,
    collect() {
      // The store counts (the engine's sweep expires); read at scrape time.
      this.reset();
      this.inc(engine.checkpointStore.expiredCount);
    },
  });

  api.route('GET', '/v1/checkpoints', async (_q, res, who, _p, url) => {
    requireOperator(who);
    // Hibernation records are not snapshots: listed only when asked for (`?kind=hibernation`, or `all`).
    const kind = url.searchParams.get('kind') ?? 'snapshot';
    // `claim_ref`: the checkpoints of one sandbox (a replacement Pod looks for its predecessor's record, handoff.ts).
    const ref = url.searchParams.get('claim_ref');
    const listed = engine
      .listCheckpoints()
      .filter((ck) => kind === 'all' || (kind === 'hibernation') === (ck.kind === 'hibernation'))
      .filter((ck) => ref === null || ck.claimRef === ref);
    json(res, 200, {
      checkpoints: listed.map((ck) => {
        const copies = p.replicator?.copiesOf(ck.id);
        return { ...checkpointRow(ck), ...(copies ? { copies } : {}) };
      }),
    });
  });

  // A peer asks this node to keep a copy of a checkpoint it holds (replicate.ts). The request names only the id:
  // the owners are the ones this node finds by its own probe, so the caller cannot make it fetch from elsewhere.
  // Answered once the copy is published (or was here already).
  api.route('POST', '/v1/checkpoints/{id}/replicate', async (_q, res, who, [id]) => {
    requireOperator(who);
    if (!CHECKPOINT_ID.test(id!)) throw new SandboxError('sandboxd.bad-request', `checkpoint id ${id} is malformed`);
    if (engine.checkpointStore.get(id!)) return json(res, 200, { id, copied: false });
    if (!p.puller || !p.owners)
      throw new SandboxError('placement.off', `node ${engine.nodeName} keeps no copies of peers' checkpoints`, {
        hint: 'start it with --checkpoint-replicas > 1 (and --token-file, --checkpoint-ttl-hours > 0)',
      });
    const owners = await p.owners.owners(id!);
    if (!owners.length) throw new SandboxError('sandboxd.not-found', `checkpoint ${id} not found on this node's peers`);
    try {
      const healed = await p.puller.heal(id!, owners);
      await engine.saveState();
      json(res, 200, { id, copied: true, from: healed.owner, bytes: healed.bytes, ms: Math.round(healed.ms) });
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'placement.busy')
        res.setHeader('retry-after', String(p.retryAfterSeconds ?? 2));
      else p.owners.forget(id!);
      throw err;
    }
  });

  api.route('DELETE', '/v1/checkpoints/{id}', async (_q, res, who, [id], url) => {
    requireOperator(who);
    // A hibernation record deleted by the peer that resumed it (a handed-off Pod's sandbox, handoff.ts) lets the
    // claim it was taken of go too: the engine releases a handed-off claim with its record.
    const local = engine.deleteCheckpoint(id!);
    p.owners?.forget(id!);
    let remote = false;
    const forwarded = url.searchParams.get('no_forward') === '1';
    if (!forwarded && p.client && p.peers)
      remote = await p.client.deleteCheckpointOn(p.peers(), id!, (peer, err) =>
        log.warn({ err, peer, checkpoint: id }, 'could not forward a checkpoint delete; that peer keeps its copy'),
      );
    if (!local && !remote) throw new SandboxError('sandboxd.not-found', `checkpoint ${id} not found`);
    res.writeHead(204).end();
  });

  api.route('POST', '/v1/checkpoints/{id}/claim', async (req, res, who, [id]) => {
    requireOperator(who);
    const body = await readJson(req);
    const ttl = optionalInt(body.ttl_seconds, 'ttl_seconds', 0);
    const claimRef = optionalString(body.claim_ref, 'claim_ref');
    const object = storedObject(body.object, claimRef);
    const identity = object !== undefined ? { claimRef: claimRef!, object } : undefined;
    // A live (or being made) claim_ref is 409 before a redirect or a pull; the engine holds the ref over its clone.
    if (identity) engine.assertClaimRefFree(identity.claimRef);
    const onExpiry = onExpiryOf(body);
    const idle = idleSecondsOf(body);
    const resumedFrom = resumedFromOf(body.resumed_from);
    // The clone enforces the checkpoint's policy with the layers given here in place of its own (null: the default).
    // Checked before a redirect or a pull.
    const given = body.network;
    const network =
      given == null ? undefined : (inherited?: VmNetworkPolicy) => updatedPolicy(inherited, given, who, 'network');
    network?.(undefined);
    const noRedirect = body.no_redirect === true;
    let healBytes: number | undefined;
    // The tier is also in the body (`tier`, `heal_bytes` for a pull), for callers that read JSON only (a resume
    // elsewhere says in its Event whether it had to fetch the record).
    const answer = (tier: ClaimTier, status: number, payload: object) => {
      claims.inc({ tier });
      res.setHeader('x-sandboxd-checkpoint-tier', tier);
      // A redirect names the owners and nothing else (the caller claims there).
      if ('redirect' in payload) return json(res, status, payload);
      json(res, status, { ...payload, tier, ...(healBytes !== undefined ? { heal_bytes: healBytes } : {}) });
    };
    if (engine.checkpointStore.get(id!)) {
      const rec = await engine.claimCheckpoint(id!, ttl, identity, onExpiry, network, idle, resumedFrom);
      return answer('local', 200, claimAnswer(rec, engine.advertiseAddr));
    }
    if (!engine.hasRoom())
      throw new SandboxError('sandboxd.at-capacity', `node at capacity (${engine.maxClaims} claims)`);
    const { owners: directory } = p;
    const owners = directory && (p.healer || !noRedirect) ? await directory.owners(id!) : [];
    if (!p.healer && !noRedirect && owners.length) return answer('redirect', 200, { redirect: owners });
    if (!p.healer || !owners.length) {
      claims.inc({ tier: 'miss' });
      throw new SandboxError(
        'sandboxd.not-found',
        `checkpoint ${id} not found${p.owners ? (noRedirect && !p.healer ? ' on this node' : ' on this node or its peers') : ''}`,
      );
    }
    try {
      const healed = await p.healer.heal(id!, owners);
      heals.inc({ result: 'ok' });
      // What the pull cost (bytes of files, ms from the first request to the rename), for callers and benchmarks.
      res.setHeader('x-sandboxd-heal-bytes', String(healed.bytes));
      healBytes = healed.bytes;
      res.setHeader('x-sandboxd-heal-ms', healed.ms.toFixed(1));
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'placement.busy') {
        heals.inc({ result: 'busy' });
        res.setHeader('retry-after', String(p.retryAfterSeconds ?? 2));
        throw err;
      }
      heals.inc({ result: 'failed' });
      directory?.forget(id!);
      if (err instanceof SandboxError) throw err;
      throw new SandboxError('placement.heal-failed', `checkpoint ${id} could not be published: ${String(err)}`, {
        cause: err,
        hint: 'no partial record was kept; retry the claim, or claim on an owner',
      });
    }
    await engine.saveState();
    const rec = await engine.claimCheckpoint(id!, ttl, identity, onExpiry, network, idle, resumedFrom);
    return answer('heal', 200, claimAnswer(rec, engine.advertiseAddr));
  });

  const blob = async (res: ServerResponse, id: string, head: boolean) => {
    const ck = engine.checkpointStore.get(id);
    if (!ck) throw new SandboxError('sandboxd.not-found', `checkpoint ${id} not found on this node`);
    if (head) return void res.writeHead(200, { 'content-type': 'application/x-tar' }).end();
    const meta = recordMeta(ck, engine.nodeName, await engine.checkpointStore.digests(ck));
    res.writeHead(200, { 'content-type': 'application/x-tar' });
    const stream = packRecord(meta, ck.template.dir);
    stream.on('data', (c: Buffer) => served.inc(c.length));
    await new Promise<void>((resolve) => {
      // A record that cannot be read whole (deleted mid-stream, a disk error) ends the connection without the
      // tar's end, so the puller sees a broken transfer rather than a short record.
      stream.on('error', (err) => {
        log.warn({ err, checkpoint: id }, 'serving a checkpoint record failed');
        res.destroy(err);
      });
      res.on('close', () => {
        stream.destroy();
        resolve();
      });
      stream.pipe(res);
    });
  };
  api.route('HEAD', '/v1/checkpoints/{id}/blob', async (_q, res, who, [id]) => {
    requireOperator(who);
    await blob(res, id!, true);
  });
  api.route('GET', '/v1/checkpoints/{id}/blob', async (_q, res, who, [id]) => {
    requireOperator(who);
    await blob(res, id!, false);
  });

  // A promoted template is node-level state: every claim and pool of its key on this node clones it, whoever asks,
  // and promoting a key again replaces it. So promote is an operator's act, not a sandbox's or a tenant's (tenants
  // never drive node-level state): with a sandbox token one tenant could plant its memory and files under a name
  // another tenant claims, or take over that tenant's promoted name.
  api.route('POST', '/v1/sandboxes/{id}/promote', async (req, res, who, [id]) => {
    requireOperator(who);
    const body = await readJson(req);
    const rec = api.authorizedSandbox(who, id!);
    const template = optionalString(body.template, 'template');
    if (!template)
      throw new SandboxError('sandboxd.bad-request', 'template: required (the name later claims use, e.g. myproj:v1)');
    const promoted = await engine.promote(rec.id, template);
    json(res, 200, { key: promoted.key, content_digest: contentDigest(promoted.files) });
  });
}

/** meta.json of a record this node serves (pool key and lineage, and the checksums: docs/placement.md). */
export function recordMeta(ck: CheckpointRecord, nodeName: string, files: RecordMeta['files']): RecordMeta {
  return {
    format: META_FORMAT,
    id: ck.id,
    ...(ck.name ? { name: ck.name } : {}),
    sandbox_id: ck.sandboxId,
    ...(ck.claimRef ? { claim_ref: ck.claimRef } : {}),
    ...(ck.kind ? { kind: ck.kind } : {}),
    key: ck.key,
    created_at: ck.createdAt,
    origin: ck.origin ?? nodeName,
    via: ck.via ?? [],
    files,
  };
}

export function checkpointRow(ck: CheckpointRecord) {
  return {
    id: ck.id,
    ...(ck.name ? { name: ck.name } : {}),
    sandbox_id: ck.sandboxId,
    ...(ck.claimRef ? { claim_ref: ck.claimRef } : {}),
    ...(ck.kind ? { kind: ck.kind } : {}),
    key: ck.key,
    created_at: ck.createdAt,
    ...(ck.origin ? { origin: ck.origin, via: ck.via ?? [] } : {}),
  };
}

/** A checkpoint claim's `resumed_from` (the fleet's root: a sandbox moved from a node that is gone). */
function resumedFromOf(v: unknown): { node: string; claimId: string } | undefined {
  if (v === undefined || v === null) return undefined;
  const o = v as { node?: unknown; claim_id?: unknown };
  if (typeof o !== 'object' || typeof o.node !== 'string' || typeof o.claim_id !== 'string' || !o.node || !o.claim_id)
    throw new SandboxError('sandboxd.bad-request', 'resumed_from: must be {node, claim_id}, both strings');
  if (o.node.length > 253 || o.claim_id.length > 64)
    throw new SandboxError('sandboxd.bad-request', 'resumed_from: node or claim_id too long');
  return { node: o.node, claimId: o.claim_id };
}
