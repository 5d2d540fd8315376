/**
 * Create = node-local claim (docs/aggregated-layout.md "How a request flows", step 8): validate the Sandbox as
 * kube-apiserver would validate the CRD (same schema source), settle its name (unique among live sandboxes: a second
 * create of a live name is 409 and spends no VM), derive its pool key and lease, then claim a warm VM on a node chosen
 * by power-of-two choices, trying the next candidate on a capacity miss. Everything that can be refused is refused
 * before a VM is spent. The answer carries the claim id, address, deadline and — only here — the sandbox token.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  CocoonAnnotationKeys,
  idleSecondsAnnotation,
  ServerWrittenSandboxKeys,
  SandboxV1beta1Schema,
  toOpenApiV3Schema,
  type Sandbox,
  kubeTime,
} from '../../api/index.js';
import { labelValueProblem, qualifiedNameProblem } from '../../api/claim-injection.js';
import { derivePoolKey, describePoolKey, type PoolKeyOf } from '../../api/pool-key.js';
import { validateStructural } from '../../api/structural-validate.js';
import type { EgressLayer, VmNetworkPolicy } from '../../api/vm-network.js';
import type { Logger } from '../../log/logger.js';
import {
  alreadyExists,
  badRequest,
  forbiddenBecause,
  internalError,
  invalid,
  notFound,
  serviceUnavailable,
  StatusFailure,
  type QualifiedResource,
  type StatusCause,
} from '../status.js';
import { SANDBOX_API_VERSION, toSandbox, type SandboxEntry, type StoredObject } from './entry.js';
import { checkpointNamespace, namespaceCheckpoints, type HeldCheckpoint } from './checkpoints.js';
import type { Fleet } from './fleet.js';
import {
  NodeHttpError,
  NodeUnreachableError,
  type ClaimAnswer,
  type ClaimBody,
  type SandboxdClient,
} from './sandboxd-client.js';
import type { SandboxStore } from './store.js';

export const SANDBOXES: QualifiedResource = { group: 'agents.x-k8s.io', resource: 'sandboxes' };

/** The stored object travels with the claim to the node; keep it well inside sandboxd's body cap. */
export const MAX_STORED_OBJECT_BYTES = 256 << 10;

const SCHEMA = toOpenApiV3Schema(SandboxV1beta1Schema);
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const GENERATE_CHARS = 'bcdfghjklmnpqrstvwxz2456789';
/** How long a claim that provisions on a miss may take (a clone under TCG: seconds; a first boot: longer). */
const PROVISION_TIMEOUT_MS = 180_000;

export interface CreateRequest {
  namespace: string;
  body: unknown;
  dryRun: boolean;
  fieldValidation: 'Strict' | 'Warn' | 'Ignore';
  warnings: string[];
  /**
   * Where the snapshot the body names is held, when the caller has just asked the nodes (the e2b API must, to learn
   * the snapshot's pool key before it writes the Sandbox): used if it is that snapshot, of this namespace, on a node
   * still synced, so the nodes are not asked twice. Without it, create asks them.
   */
  snapshotHolder?: HeldCheckpoint;
  /**
   * Keys of ServerWrittenSandboxKeys this internal caller writes (the claim binder's); set by in-process callers
   * only, never from a request. Any other server-written key on the body is refused.
   */
  serverKeys?: readonly string[];
  /**
   * The egress policy's layers to send with the claim (docs/sandboxd-api.md "Network policy"); set by in-process
   * callers only (the e2b API's tenant layer), never from a request. A clone of a snapshot keeps the layers of the
   * sandbox it was taken of except those given here (`null`: that layer back to the default).
   */
  network?: { template?: EgressLayer | null; tenant?: EgressLayer | null };
  /**
   * A miss makes a VM instead of answering 503: with no warm VM of the key anywhere (or no node declaring its pool),
   * a synced node clones or boots one (sandboxd's claim without warm_only). Set by in-process callers only: the e2b
   * API, whose JS SDK does not retry a 503 (docs/e2b.md "Capacity"). The Kubernetes API keeps its 503s: its
   * callers are told to declare a pool, and a claim's Ready condition says so.
   */
  provisionOnMiss?: boolean;
}

export interface NamespaceState {
  /** 'active', 'terminating' or 'missing'. */
  phase(namespace: string): 'active' | 'terminating' | 'missing';
}

export interface Created {
  object: Sandbox;
  entry: SandboxEntry | undefined;
}

function generateName(base: string): string {
  const bytes = randomBytes(5);
  let suffix = '';
  for (const b of bytes) suffix += GENERATE_CHARS[b % GENERATE_CHARS.length];
  return `${base.slice(0, 63 - 5)}${suffix}`;
}

function nameCauses(name: string, field: string): StatusCause[] {
  if (name.length > 253)
    return [
      { reason: 'FieldValueInvalid', field, message: `Invalid value: "${name}": must be no more than 253 characters` },
    ];
  if (!DNS_SUBDOMAIN.test(name))
    return [
      {
        reason: 'FieldValueInvalid',
        field,
        message: `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`,
      },
    ];
  return [];
}

/** Upstream's limit on the total size of an object's annotations (apimachinery TotalAnnotationSizeLimitB). */
const MAX_ANNOTATION_BYTES = 256 * 1024;

/**
 * The root metadata's own checks, which the schema check (run without metadata) leaves out. `decode`: a value of the
 * wrong JSON type, which upstream's decoder refuses with a 400 before anything is validated (a number where a string
 * belongs once reached `.trim()` and answered 500); `causes`: label and annotation keys and values that are not
 * valid, as upstream's ValidateObjectMeta names them (422).
 */
function metadataCauses(meta: Record<string, unknown>): { decode?: string; causes: StatusCause[] } {
  for (const f of ['name', 'generateName', 'namespace'] as const)
    if (meta[f] !== undefined && typeof meta[f] !== 'string')
      return { decode: `metadata.${f}: must be a string, not ${typeof meta[f]}`, causes: [] };
  const causes: StatusCause[] = [];
  for (const kind of ['labels', 'annotations'] as const) {
    const m = meta[kind];
    if (m === undefined || m === null) continue;
    if (typeof m !== 'object' || Array.isArray(m))
      return { decode: `metadata.${kind}: must be an object of strings`, causes: [] };
    let bytes = 0;
    for (const [k, v] of Object.entries(m)) {
      if (typeof v !== 'string')
        return {
          decode: `metadata.${kind}[${k}]: must be a string, not ${v === null ? 'null' : typeof v}`,
          causes: [],
        };
      const problem = qualifiedNameProblem(k) ?? (kind === 'labels' ? labelValueProblem(k, v) : undefined);
      if (problem)
        causes.push({ reason: 'FieldValueInvalid', field: `metadata.${kind}`, message: `Invalid value: ${problem}` });
      bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
    }
    if (kind === 'annotations' && bytes > MAX_ANNOTATION_BYTES)
      causes.push({
        reason: 'FieldValueTooLong',
        field: 'metadata.annotations',
        message: `Too long: must have at most ${MAX_ANNOTATION_BYTES} bytes`,
      });
  }
  return { causes };
}

/**
 * A cause per server-written label or annotation (ServerWrittenSandboxKeys) the body sets, except the `allowed` ones
 * an internal writer is creating with: a create that set them would forge a claim, a gateway delivery, a binding.
 */
function serverWrittenCauses(meta: Sandbox['metadata'], allowed: readonly string[]): StatusCause[] {
  const causes: StatusCause[] = [];
  for (const kind of ['labels', 'annotations'] as const)
    for (const k of ServerWrittenSandboxKeys[kind])
      if (meta?.[kind]?.[k] !== undefined && !allowed.includes(k))
        causes.push({
          reason: 'FieldValueForbidden',
          field: `metadata.${kind}[${k}]`,
          message: 'Forbidden: set by the server',
        });
  return causes;
}

/** Seconds of lease the object asks for (0 = the node's default); 400s name the field. */
export function leaseSeconds(obj: Sandbox, now = Date.now()): number {
  const shutdown = obj.spec.shutdownTime;
  if (shutdown) {
    const at = Date.parse(shutdown);
    if (!Number.isFinite(at) || at <= now)
      throw badRequest(`spec.shutdownTime ${shutdown} is not in the future`, [
        { reason: 'FieldValueInvalid', field: 'spec.shutdownTime', message: 'must be in the future' },
      ]);
    return Math.ceil((at - now) / 1000);
  }
  const raw = obj.metadata?.annotations?.[CocoonAnnotationKeys.ttlSeconds]?.trim();
  if (raw === undefined || raw === '') return 0;
  if (!/^\d+$/.test(raw))
    throw badRequest(
      `annotation ${CocoonAnnotationKeys.ttlSeconds}="${raw}" is not a non-negative whole number of seconds`,
      [
        {
          reason: 'FieldValueInvalid',
          field: `metadata.annotations[${CocoonAnnotationKeys.ttlSeconds}]`,
          message: 'must be a non-negative integer',
        },
      ],
    );
  return Number(raw);
}

/** What a create asks of the lease besides its length: the lease-end action and the idle policy (sandboxd's names). */
export type LeasePolicy = Pick<ClaimBody, 'on_expiry' | 'idle_hibernate_seconds'>;

export class SandboxCreator {
  /** Names with a claim in flight: a concurrent create of the same name is refused, not raced. */
  private readonly inFlight = new Set<string>();

  constructor(
    private readonly store: SandboxStore,
    private readonly fleet: Fleet,
    private readonly client: SandboxdClient,
    private readonly namespaces: NamespaceState,
    private readonly log: Logger,
  ) {}

  /** Parse and check everything that does not depend on the fleet; throws the Status to answer. */
  validate(req: CreateRequest): {
    obj: Sandbox;
    name: string;
    key: PoolKeyOf;
    ttl: number;
    policy: LeasePolicy;
  } {
    const body = req.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw badRequest('the request body must be a JSON object (a Sandbox)');
    const raw = body as Record<string, unknown>;
    if (raw.kind !== undefined && raw.kind !== 'Sandbox')
      throw badRequest(`the kind in the data ("${String(raw.kind)}") does not match the expected kind ("Sandbox")`);
    if (raw.apiVersion !== undefined && raw.apiVersion !== SANDBOX_API_VERSION)
      throw badRequest(
        `the API version in the data (${String(raw.apiVersion)}) does not match the expected API version (${SANDBOX_API_VERSION})`,
      );
    const meta = (raw.metadata ?? {}) as Sandbox['metadata'] & Record<string, unknown>;
    if (typeof meta !== 'object' || Array.isArray(meta)) throw badRequest('metadata: must be an object');
    if (meta.namespace && meta.namespace !== req.namespace)
      throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
    if (meta.resourceVersion) throw badRequest('resourceVersion should not be set on objects to be created');
    const metaProblems = metadataCauses(meta);
    if (metaProblems.decode) throw badRequest(metaProblems.decode);
    const result = validateStructural(SCHEMA, { ...raw, metadata: {} });
    if (result.unknown.length) {
      const msgs = result.unknown.map((f) => `unknown field "${f}"`);
      if (req.fieldValidation === 'Strict') throw badRequest(`strict decoding error: ${msgs.join(', ')}`);
      if (req.fieldValidation === 'Warn') req.warnings.push(...msgs);
    }
    const name = meta.name || (meta.generateName ? generateName(meta.generateName) : '');
    const causes: StatusCause[] = result.errors.map((e) => ({ reason: e.reason, field: e.field, message: e.message }));
    if (!meta.name && !meta.generateName)
      throw badRequest('Sandbox has neither metadata.name nor metadata.generateName', [
        {
          reason: 'FieldValueRequired',
          field: 'metadata.name',
          message: 'Required value: name or generateName is required',
        },
      ]);
    causes.push(...nameCauses(name, meta.name ? 'metadata.name' : 'metadata.generateName'), ...metaProblems.causes);
    if (meta.finalizers?.length)
      causes.push({
        reason: 'FieldValueForbidden',
        field: 'metadata.finalizers',
        message: 'Forbidden: sandboxes served from the nodes are deleted at once; finalizers cannot hold them',
      });
    causes.push(...serverWrittenCauses(meta, req.serverKeys ?? []));
    const obj = raw as unknown as Sandbox;
    const key = causes.length
      ? undefined
      : derivePoolKey({ annotations: meta.annotations, podTemplate: obj.spec?.podTemplate });
    if (key && !key.ok) causes.push({ reason: 'FieldValueInvalid', field: key.field, message: key.message });
    if (causes.length || !key || !key.ok) throw invalid('Sandbox', SANDBOXES.group, name, causes);
    const ttl = leaseSeconds(obj);
    const expiry = meta.annotations?.[CocoonAnnotationKeys.onExpiry];
    const expiryField = `metadata.annotations[${CocoonAnnotationKeys.onExpiry}]`;
    if (expiry !== undefined && expiry !== 'release' && expiry !== 'hibernate' && expiry !== 'pause-filesystem')
      throw badRequest(
        `annotation ${CocoonAnnotationKeys.onExpiry}="${expiry}" must be release, hibernate or pause-filesystem`,
        [
          {
            reason: 'FieldValueNotSupported',
            field: expiryField,
            message: 'supported values: "release", "hibernate", "pause-filesystem"',
          },
        ],
      );
    // The idle policy: on the Sandbox, else on its pod template (where a SandboxTemplate's pod template puts it).
    const idleField = (where: string) => `${where}.annotations[${CocoonAnnotationKeys.idleHibernateSeconds}]`;
    const fromMeta = idleSecondsAnnotation(meta.annotations);
    const fromPod = idleSecondsAnnotation(obj.spec?.podTemplate?.metadata?.annotations);
    for (const [v, where] of [
      [fromMeta, 'metadata'],
      [fromPod, 'spec.podTemplate.metadata'],
    ] as const)
      if (typeof v === 'string')
        throw invalid('Sandbox', SANDBOXES.group, name, [
          { reason: 'FieldValueInvalid', field: idleField(where), message: `Invalid value: ${v}` },
        ]);
    const idle = (fromMeta ?? fromPod) as number | undefined;
    return {
      obj,
      name,
      key: key.key,
      ttl,
      policy: {
        // pause-filesystem: its files only at the lease's end (sandboxd's files-pause.ts).
        ...(expiry === 'hibernate' || expiry === 'pause-filesystem' ? { on_expiry: expiry } : {}),
        ...(idle ? { idle_hibernate_seconds: idle } : {}),
      },
    };
  }

  async create(req: CreateRequest): Promise<Created> {
    const { obj, name, key, ttl, policy } = this.validate(req);
    const ns = req.namespace;
    const phase = this.namespaces.phase(ns);
    if (phase === 'missing') throw notFound({ group: '', resource: 'namespaces' }, ns);
    if (phase === 'terminating')
      throw forbiddenBecause(
        SANDBOXES,
        name,
        `unable to create new content in namespace ${ns} because it is being terminated`,
      );
    const k = `${ns}/${name}`;
    if (this.store.get(k) || this.inFlight.has(k)) throw alreadyExists(SANDBOXES, name);
    const stored: StoredObject = {
      metadata: {
        name,
        namespace: ns,
        uid: randomUUID(),
        creationTimestamp: kubeTime(),
        ...(obj.metadata?.labels ? { labels: obj.metadata.labels } : {}),
        ...(obj.metadata?.annotations ? { annotations: obj.metadata.annotations } : {}),
        ...(obj.metadata?.ownerReferences?.length ? { ownerReferences: obj.metadata.ownerReferences } : {}),
      },
      spec: obj.spec,
    };
    const size = Buffer.byteLength(JSON.stringify(stored));
    if (size > MAX_STORED_OBJECT_BYTES)
      throw invalid('Sandbox', SANDBOXES.group, name, [
        {
          reason: 'FieldValueTooLong',
          field: 'metadata',
          message: `Too long: the object is ${size} bytes; at most ${MAX_STORED_OBJECT_BYTES} are stored with a claim`,
        },
      ]);
    const snapshot = obj.metadata?.annotations?.[CocoonAnnotationKeys.snapshot]?.trim();
    if (snapshot) return this.fromSnapshot(k, snapshot, ttl, stored, req, policy);
    const network = freshPolicy(req.network);
    if (!this.fleet.servesKey(key) && !req.provisionOnMiss)
      throw serviceUnavailable(
        `no node serves pool (${describePoolKey(key)}); create a SandboxWarmPool for it or check the nodes' pools`,
        5,
      );
    if (req.dryRun) {
      if (this.fleet.candidates(key).length === 0 && !(req.provisionOnMiss && this.fleet.provisioners(key).length))
        throw noCapacity(key);
      return {
        object: { apiVersion: SANDBOX_API_VERSION, kind: 'Sandbox', metadata: stored.metadata, spec: obj.spec },
        entry: undefined,
      };
    }
    this.inFlight.add(k);
    try {
      return await this.claim(k, key, ttl, stored, policy, network, req.provisionOnMiss === true);
    } finally {
      this.inFlight.delete(k);
    }
  }

  /**
   * A Sandbox that starts from a snapshot is served by the node that holds it (a clone of the checkpoint there);
   * the nodes are asked which, in parallel. Moving a checkpoint to another node is the placement layer's job.
   */
  private async fromSnapshot(
    k: string,
    id: string,
    ttl: number,
    stored: StoredObject,
    { dryRun, snapshotHolder: given, network }: CreateRequest,
    policy: LeasePolicy,
  ): Promise<Created> {
    const field = `metadata.annotations[${CocoonAnnotationKeys.snapshot}]`;
    const namespace = stored.metadata.namespace;
    // Another namespace's checkpoint is not this one's to clone, and reads as absent (checkpoints.ts); a holder the
    // caller passes is held to the same rule as one found here.
    const usable =
      given &&
      given.ck.id === id &&
      checkpointNamespace(given.ck, this.store.getByClaim(given.ck.sandbox_id)) === namespace &&
      this.fleet.isSynced(given.node) &&
      this.fleet.address(given.node) === given.address;
    const holder = usable
      ? given
      : (await namespaceCheckpoints(this.fleet, this.client, this.store, namespace, { syncedOnly: true })).find(
          ({ ck }) => ck.id === id,
        );
    if (!holder)
      throw invalid('Sandbox', SANDBOXES.group, stored.metadata.name, [
        { reason: 'FieldValueNotFound', field, message: `Not found: snapshot "${id}" is on no reachable node` },
      ]);
    if (dryRun)
      return {
        object: { apiVersion: SANDBOX_API_VERSION, kind: 'Sandbox', metadata: stored.metadata, spec: stored.spec },
        entry: undefined,
      };
    this.inFlight.add(k);
    try {
      const answer = (await this.client.call(
        holder.node,
        holder.address,
        'POST',
        `/v1/checkpoints/${encodeURIComponent(id)}/claim`,
        {
          ...(ttl ? { ttl_seconds: ttl } : {}),
          ...policy,
          claim_ref: k,
          object: stored,
          ...(network ? { network } : {}),
        },
        60_000,
      )) as ClaimAnswer;
      return this.answered(holder.node, holder.address, answer);
    } catch (err) {
      if (err instanceof StatusFailure) throw err;
      if (err instanceof NodeHttpError) {
        if (err.status === 409) throw alreadyExists(SANDBOXES, stored.metadata.name);
        // The node's own answers to a clone it will not make, as plain creates map them (a 429: at capacity, or
        // draining; the node's message says which).
        if (err.status === 429)
          throw serviceUnavailable(`node ${holder.node} makes no clone of snapshot ${id} now: ${err.message}`, 2);
        if (err.status === 404)
          throw invalid('Sandbox', SANDBOXES.group, stored.metadata.name, [
            {
              reason: 'FieldValueNotFound',
              field,
              message: `Not found: snapshot "${id}" is gone from node ${holder.node}`,
            },
          ]);
        if (err.status === 400) throw badRequest(`node ${holder.node} refused the clone: ${err.message}`);
      }
      if (err instanceof NodeUnreachableError && !err.timedOut)
        throw serviceUnavailable(`node ${holder.node}, which holds snapshot ${id}, is unreachable; retry`, 2);
      // A timeout may have cloned: the node's feed then shows the sandbox under this name, and a retry gets 409.
      throw internalError(`claim from snapshot ${id} on node ${holder.node} failed: ${(err as Error).message}`);
    } finally {
      this.inFlight.delete(k);
    }
  }

  /** Resolves on the fleet's next change (a node synced, pools reported), or after `ms`. */
  private fleetChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        off();
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      const off = this.fleet.onChange(done);
    });
  }

  /** A node's claim answer: indexed at once (read-your-writes), returned with the token (this answer only). */
  private answered(node: string, address: string, answer: ClaimAnswer): Created {
    const entry = this.store.upsert(node, address, answer.sandbox);
    if (!entry) throw internalError(`node ${node} answered the claim without the sandbox's identity`);
    const object = toSandbox(entry);
    object.metadata!.annotations![CocoonAnnotationKeys.token] = answer.token;
    object.metadata!.annotations![CocoonAnnotationKeys.address] = answer.owner_addr || address;
    return { object, entry };
  }

  private async claim(
    k: string,
    key: PoolKeyOf,
    ttl: number,
    stored: StoredObject,
    policy: LeasePolicy,
    network: VmNetworkPolicy | undefined,
    provisionOnMiss: boolean,
  ): Promise<Created> {
    let candidates = this.fleet.candidates(key);
    // After the warm candidates, the nodes that make one on a miss (each once), when the caller wants that.
    let makers = provisionOnMiss ? this.fleet.provisioners(key) : [];
    const queueUntil = Date.now() + PROVISION_QUEUE_MS;
    for (;;) {
      if (provisionOnMiss && candidates.length === 0 && makers.length === 0 && Date.now() < queueUntil) {
        // No node can take it this moment (none synced yet, every one at --max-claims): wait for the fleet to
        // change (a node syncs, a pool refills) rather than answer 503, within the queue's bound.
        await this.fleetChange(queueUntil - Date.now());
        candidates = this.fleet.candidates(key);
        makers = this.fleet.provisioners(key);
        continue;
      }
      const warm = this.fleet.pick(candidates);
      const c = warm ?? makers[0];
      if (!c) throw noCapacity(key);
      try {
        const answer = await this.client.claim(
          c.node,
          c.address,
          {
            template: key.template,
            net: key.net,
            size: key.size,
            ...(ttl ? { ttl_seconds: ttl } : {}),
            ...policy,
            claim_ref: k,
            no_redirect: true,
            warm_only: warm !== undefined,
            object: stored,
            ...(network ? { network } : {}),
          },
          // A clone takes seconds under TCG, a first boot of the key's template longer.
          warm ? undefined : PROVISION_TIMEOUT_MS,
        );
        if (warm) this.fleet.noteWarm(c.node, key, -1);
        return this.answered(c.node, c.address, answer);
      } catch (err) {
        if (err instanceof NodeHttpError && err.status === 429) {
          if (warm) {
            this.fleet.noteWarm(c.node, key, 'empty');
            candidates.splice(candidates.indexOf(c), 1);
          } else makers.shift(); // at --max-claims
          continue;
        }
        if (err instanceof NodeUnreachableError && !err.timedOut) {
          this.log.warn({ node: c.node, err: err.message }, 'node unreachable for a claim; trying another');
          if (warm) candidates.splice(candidates.indexOf(c), 1);
          else makers.shift();
          continue;
        }
        if (err instanceof StatusFailure) throw err;
        if (err instanceof NodeHttpError && err.status === 409) throw alreadyExists(SANDBOXES, stored.metadata.name);
        // A timeout may have claimed: the node's feed then shows the sandbox under this name, and a retry of the
        // create gets 409 instead of a second VM.
        throw internalError(`claim on node ${c.node} failed: ${(err as Error).message}`);
      }
    }
  }
}

/** How long a create that provisions on a miss waits for a node that can take it before its 503. */
const PROVISION_QUEUE_MS = 30_000;

/** The layers a fresh VM's claim carries (a `null` layer is the default, which a fresh VM has already). */
function freshPolicy(given: CreateRequest['network']): VmNetworkPolicy | undefined {
  const policy: VmNetworkPolicy = {
    ...(given?.template ? { template: given.template } : {}),
    ...(given?.tenant ? { tenant: given.tenant } : {}),
  };
  return policy.template || policy.tenant ? policy : undefined;
}

function noCapacity(key: PoolKeyOf): StatusFailure {
  return serviceUnavailable(
    `no warm sandbox available for pool (${describePoolKey(key)}); retry as warm capacity refills`,
    1,
  );
}
