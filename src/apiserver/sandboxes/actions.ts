/**
 * The lifecycle verbs of a served sandbox, POST-only subresources (docs/aggregated-layout.md "Lifecycle verbs"):
 * pause and resume (the node chooses memory-resident pause or hibernation, and the answer says which), fork into
 * children that are Sandboxes in the parent's namespace, snapshot into a checkpoint a new Sandbox can start from,
 * and exec of one command. Each goes to the owning node by claim id; what the node answers is applied to the store
 * at once, so readers and watchers see the new phase or the children before the node's feed says so.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  CocoonAnnotationKeys,
  idleSecondsAnnotation,
  withoutServerWrittenKeys,
  SandboxExecOptionsSchema,
  SandboxExecResultSchema,
  SandboxForkOptionsSchema,
  SandboxForkResultSchema,
  SandboxPauseOptionsSchema,
  SandboxResumeOptionsSchema,
  SandboxSnapshotOptionsSchema,
  SandboxSnapshotResultSchema,
  toOpenApiV3Schema,
  type SandboxExecOptions,
  type SandboxForkOptions,
  type SandboxForkResult,
  type SandboxSnapshotOptions,
  kubeTime,
  snapshotNameProblem,
} from '../../api/index.js';
import { validateStructural } from '../../api/structural-validate.js';
import type { TSchema } from '@sinclair/typebox';
import {
  badRequest,
  conflict,
  forbiddenBecause,
  internalError,
  invalid,
  notFound,
  serviceUnavailable,
  StatusFailure,
  tooManyRequests,
} from '../status.js';
import type { ActionSubresource } from '../types.js';
import { SANDBOXES } from './create.js';
import { SANDBOX_API_VERSION, type NodeRow, type SandboxEntry, type StoredObject } from './entry.js';
import { NodeHttpError, NodeUnreachableError, type SandboxdClient } from './sandboxd-client.js';
import type { Fleet } from './fleet.js';
import type { SandboxStore } from './store.js';
import { SandboxVerbEvents, type Moved, type MovedBecause } from './verb-events.js';

const action = (
  name: string,
  requestKind: string,
  requestSchema: TSchema,
  responseKind: string,
  responseSchema: TSchema,
  description: string,
): ActionSubresource => ({
  name,
  requestKind,
  requestSchema,
  responseKind,
  responseSchema,
  description,
});

/** The subresources, for discovery and OpenAPI (the storage's descriptor lists them). */
export const SANDBOX_ACTIONS: readonly ActionSubresource[] = [
  action(
    'pause',
    'SandboxPauseOptions',
    SandboxPauseOptionsSchema,
    'SandboxPauseOptions',
    SandboxPauseOptionsSchema,
    'Pause the sandbox (its processes stop; memory is kept). Idempotent.',
  ),
  action(
    'resume',
    'SandboxResumeOptions',
    SandboxResumeOptionsSchema,
    'SandboxResumeOptions',
    SandboxResumeOptionsSchema,
    'Resume a paused sandbox where it stopped. Idempotent.',
  ),
  action(
    'fork',
    'SandboxForkOptions',
    SandboxForkOptionsSchema,
    'SandboxForkResult',
    SandboxForkResultSchema,
    'Make children that start from this sandbox’s memory and disk; each is a Sandbox of its own.',
  ),
  action(
    'snapshot',
    'SandboxSnapshotOptions',
    SandboxSnapshotOptionsSchema,
    'SandboxSnapshotResult',
    SandboxSnapshotResultSchema,
    'Save the sandbox’s state as a snapshot new Sandboxes can start from.',
  ),
  action(
    'exec',
    'SandboxExecOptions',
    SandboxExecOptionsSchema,
    'SandboxExecResult',
    SandboxExecResultSchema,
    'Run one command in the sandbox and return its exit code and output.',
  ),
];

/**
 * The bound on a node's fork, snapshot or exec: they take seconds (guest memory written out; a command), far more
 * on a loaded machine, where the node's default call timeout would give up on a fork that is still being made.
 */
export const SLOW_VERB_TIMEOUT_MS = 60_000;

const SCHEMAS = new Map(SANDBOX_ACTIONS.map((a) => [a.name, toOpenApiV3Schema(a.requestSchema)]));
const GENERATE_CHARS = 'bcdfghjklmnpqrstvwxz2456789';

/**
 * The node's HTTP answer as the Status the client gets (the node's message, the Kubernetes reason). A 5xx's message
 * is already the incident id only (sandboxd-client.ts): the node's text is in this server's log.
 */
export function nodeFailure(err: unknown, name: string, what: string): StatusFailure {
  if (err instanceof StatusFailure) return err;
  if (err instanceof NodeHttpError) {
    const msg = err.message.replace(/^node \S+: HTTP \d+: /, '');
    if (err.status === 400) return badRequest(`${what}: ${msg}`);
    if (err.status === 403) return forbiddenBecause(SANDBOXES, name, `${what}: ${msg}`);
    if (err.status === 404) return notFound(SANDBOXES, name);
    if (err.status === 409) return conflict(SANDBOXES, name, msg);
    if (err.status === 429) return tooManyRequests(`${what}: ${msg}`, 1);
    return internalError(`${what}: ${err.message}`);
  }
  return serviceUnavailable(`${what}: ${(err as Error).message}; retry`, 2);
}

export class SandboxActions {
  constructor(
    private readonly store: SandboxStore,
    private readonly client: SandboxdClient,
    private readonly events: SandboxVerbEvents = new SandboxVerbEvents(undefined),
    /** The fleet, where a hibernated sandbox whose node is gone resumes (resumeElsewhere). */
    private readonly fleet?: Pick<Fleet, 'nodeNames' | 'address' | 'isSynced' | 'isDraining'>,
  ) {}

  /**
   * `user` is the request's authenticated identity, named in the verb's Event (verb-events.ts). A request that
   * never reached the sandbox (a malformed body, a name that is not served) records nothing: there is no Sandbox
   * to regard.
   */
  async act(namespace: string, name: string, sub: string, raw: unknown, user = 'unknown'): Promise<unknown> {
    const spec = SANDBOX_ACTIONS.find((a) => a.name === sub)!;
    const body = this.parse(spec, raw ?? {});
    const e = this.store.get(`${namespace}/${name}`);
    if (!e) throw notFound(SANDBOXES, name);
    try {
      switch (sub) {
        case 'pause': {
          const out = await this.pause(e);
          this.events.succeeded(e, { verb: 'pause', mode: out.mode }, user);
          return out;
        }
        case 'resume': {
          const { answer, moved } = await this.resume(e);
          this.events.succeeded(e, { verb: 'resume', ...(moved ? { moved } : {}) }, user);
          return answer;
        }
        case 'fork': {
          const out = await this.fork(e, body as SandboxForkOptions);
          this.events.succeeded(e, { verb: 'fork', children: out.children.map((c) => c.name) }, user);
          return out;
        }
        case 'snapshot': {
          const out = await this.snapshot(e, body as SandboxSnapshotOptions);
          this.events.succeeded(e, { verb: 'snapshot', ...out }, user);
          return out;
        }
        default:
          // An exec that wakes the sandbox on another node records the move as the resume verb does.
          return await this.exec(e, body as unknown as SandboxExecOptions, (moved) =>
            this.events.succeeded(e, { verb: 'resume', moved }, user),
          );
      }
    } catch (err) {
      const failure = nodeFailure(err, name, `${sub} of ${namespace}/${name}`);
      this.events.failed(e, sub, user, failure);
      throw failure;
    }
  }

  /** The request kind, strictly: unknown fields and wrong kinds are 400s, as a strict create is. */
  private parse(spec: ActionSubresource, raw: unknown): Record<string, unknown> {
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw badRequest(`the body must be a ${spec.requestKind}`);
    const body = raw as Record<string, unknown>;
    if (body.kind !== undefined && body.kind !== spec.requestKind)
      throw badRequest(
        `the kind in the data ("${String(body.kind)}") does not match the expected kind ("${spec.requestKind}")`,
      );
    if (body.apiVersion !== undefined && body.apiVersion !== SANDBOX_API_VERSION)
      throw badRequest(
        `the API version in the data (${String(body.apiVersion)}) does not match the expected API version (${SANDBOX_API_VERSION})`,
      );
    const r = validateStructural(SCHEMAS.get(spec.name)!, body);
    if (r.unknown.length)
      throw badRequest(`strict decoding error: ${r.unknown.map((f) => `unknown field "${f}"`).join(', ')}`);
    if (r.errors.length)
      throw badRequest(
        r.errors.map((x) => `${x.field}: ${x.message}`).join('; '),
        r.errors.map((x) => ({ reason: x.reason, field: x.field, message: x.message })),
      );
    return body;
  }

  private call(e: SandboxEntry, verb: string, body?: unknown, timeoutMs = SLOW_VERB_TIMEOUT_MS) {
    const path = `/v1/sandboxes/${encodeURIComponent(e.claimId)}/${verb}`;
    return this.client.call(e.node, e.address, 'POST', path, body, timeoutMs);
  }

  private async pause(e: SandboxEntry) {
    const out = (await this.call(e, 'pause')) as { mode: 'memory' | 'hibernate'; sandbox: NodeRow };
    this.store.upsert(e.node, e.address, out.sandbox);
    return {
      apiVersion: SANDBOX_API_VERSION,
      kind: 'SandboxPauseOptions',
      mode: out.mode === 'hibernate' ? ('Hibernate' as const) : ('Memory' as const),
    };
  }

  private async resume(e: SandboxEntry) {
    const answer = { apiVersion: SANDBOX_API_VERSION, kind: 'SandboxResumeOptions' };
    const away = e.hibernationCheckpoint ? this.gone(e) : undefined;
    if (away) return { answer, moved: await this.resumeElsewhere(e, e.hibernationCheckpoint!, away) };
    try {
      const out = (await this.call(e, 'resume')) as { sandbox: NodeRow };
      this.store.upsert(e.node, e.address, out.sandbox);
      return { answer };
    } catch (err) {
      const why = e.hibernationCheckpoint ? movedBecause(err) : undefined;
      if (!why) throw err;
      return { answer, moved: await this.resumeElsewhereOr(err, e, e.hibernationCheckpoint!, why) };
    }
  }

  /**
   * resumeElsewhere after the sandbox's own node refused the wake: a node that answered (full, draining) keeps its
   * answer (a 429 the caller may retry) when no other node can take the sandbox either.
   */
  private async resumeElsewhereOr(
    refusal: unknown,
    e: SandboxEntry,
    checkpoint: string,
    why: MovedBecause,
  ): Promise<Moved> {
    try {
      return await this.resumeElsewhere(e, checkpoint, why);
    } catch (err) {
      throw why === 'unavailable' ? err : refusal;
    }
  }

  /**
   * Its node is gone, draining or full: resume the sandbox on a node that holds a copy of its hibernation record
   * (docs/placement.md "Resume anywhere"): a claim of the record there carrying the same object and lease, which
   * the store applies as a move of the object (one MODIFIED). The old claim is superseded: released now on a node
   * that is up (draining, full), and on one that was gone when it comes back.
   */
  private async resumeElsewhere(e: SandboxEntry, checkpoint: string, why: MovedBecause): Promise<Moved> {
    const nodes = (this.fleet?.nodeNames() ?? []).filter((n) => n !== e.node && this.fleet!.isSynced(n));
    const path = `/v1/checkpoints/${encodeURIComponent(checkpoint)}`;
    const probes = await Promise.all(
      nodes.map(async (node) => {
        const address = this.fleet!.address(node);
        if (!address) return undefined;
        // The record's own HEAD (the node's checkpoint table, no listing of every record it holds).
        const held = await this.client.call(node, address, 'HEAD', `${path}/blob`, undefined, 5000).then(
          () => true,
          () => false,
        );
        return held ? { node, address } : undefined;
      }),
    );
    const holders = probes.filter((h): h is { node: string; address: string } => h !== undefined);
    if (!holders.length)
      throw serviceUnavailable(
        `node ${e.node} is unavailable, and no other node holds the hibernation record ${checkpoint} of ${e.key}; retry once the node is back`,
        5,
      );
    const annotations = e.object.metadata.annotations;
    const idle =
      idleSecondsAnnotation(annotations) ?? idleSecondsAnnotation(e.object.spec?.podTemplate?.metadata?.annotations);
    const leftSeconds = Math.ceil((Date.parse(e.deadline) - Date.now()) / 1000);
    let lastErr: unknown;
    for (const h of holders) {
      try {
        const out = (await this.client.call(
          h.node,
          h.address,
          'POST',
          `${path}/claim`,
          {
            ...(leftSeconds > 0 ? { ttl_seconds: leftSeconds } : {}),
            ...(annotations?.[CocoonAnnotationKeys.onExpiry] === 'hibernate' ? { on_expiry: 'hibernate' } : {}),
            ...(typeof idle === 'number' ? { idle_hibernate_seconds: idle } : {}),
            claim_ref: e.key,
            object: e.object,
            no_redirect: true,
            resumed_from: { node: e.node, claim_id: e.claimId },
          },
          SLOW_VERB_TIMEOUT_MS,
        )) as { sandbox: NodeRow; tier?: string; heal_bytes?: number };
        if (!this.store.upsert(h.node, h.address, out.sandbox))
          throw internalError(`the resumed claim of ${e.key} on node ${h.node} was not taken as its move`);
        // The old claim, on a node still up (draining): released now (a node that is gone is told when it is back).
        if (this.store.nodeAvailable(e.node))
          void this.client
            .release(e.node, e.address, e.claimId)
            .catch(() => this.store.onStale?.(e.node, e.address, e.claimId));
        return {
          from: e.node,
          to: h.node,
          checkpoint,
          why,
          ...(out.tier === 'heal' && out.heal_bytes !== undefined ? { fetchedBytes: out.heal_bytes } : {}),
        };
      } catch (err) {
        lastErr = err;
      }
    }
    throw lastErr;
  }

  /** Children are named `<parent>-fork-<5 chars>`, labelled with their parent, and carry its spec. */
  private async fork(e: SandboxEntry, opts: SandboxForkOptions): Promise<SandboxForkResult> {
    const count = opts.count ?? 1;
    const names = new Set<string>();
    while (names.size < count) {
      let suffix = '';
      for (const b of randomBytes(5)) suffix += GENERATE_CHARS[b % GENERATE_CHARS.length];
      const n = `${e.name.slice(0, 253 - 11)}-fork-${suffix}`;
      if (!this.store.get(`${e.namespace}/${n}`)) names.add(n);
    }
    const parent = e.object.metadata;
    // The parent's own keys, not what a server wrote on it (a gateway delivery's marks, a binder's claim UID): a
    // child is neither; and not its snapshot (the child is forked from the parent, not cloned from the snapshot).
    const userAnnotations = withoutServerWrittenKeys('annotations', parent.annotations);
    delete userAnnotations[CocoonAnnotationKeys.snapshot];
    const objects = [...names].map((n): { claim_ref: string; object: StoredObject } => ({
      claim_ref: `${e.namespace}/${n}`,
      object: {
        metadata: {
          name: n,
          namespace: e.namespace,
          uid: randomUUID(),
          creationTimestamp: kubeTime(),
          labels: { ...withoutServerWrittenKeys('labels', parent.labels), [CocoonAnnotationKeys.forkedFrom]: e.name },
          ...(Object.keys(userAnnotations).length ? { annotations: userAnnotations } : {}),
        },
        spec: e.object.spec,
      },
    }));
    const out = (await this.call(e, 'fork', {
      count,
      ...(opts.ttlSeconds ? { ttl_seconds: opts.ttlSeconds } : {}),
      objects,
    })) as { children: Array<{ id: string; token: string; deadline: string; owner_addr: string; sandbox: NodeRow }> };
    const children = out.children.map((c) => {
      const child = this.store.upsert(e.node, e.address, c.sandbox);
      return {
        name: child?.name ?? c.sandbox.object?.metadata.name ?? c.id,
        namespace: e.namespace,
        sandboxID: c.id,
        nodeName: e.node,
        address: c.owner_addr || e.address,
        token: c.token,
        deadline: c.deadline,
      };
    });
    return { apiVersion: SANDBOX_API_VERSION, kind: 'SandboxForkResult', children };
  }

  private async snapshot(e: SandboxEntry, opts: SandboxSnapshotOptions) {
    const problem = opts.name === undefined ? undefined : snapshotNameProblem(opts.name);
    if (problem)
      throw invalid('SandboxSnapshotOptions', SANDBOXES.group, e.name, [
        {
          reason: 'FieldValueInvalid',
          field: 'name',
          message: `Invalid value: ${JSON.stringify(opts.name)}: ${problem}`,
        },
      ]);
    const out = (await this.call(e, 'checkpoint', opts.name ? { name: opts.name } : {})) as {
      checkpoint: { id: string; name?: string; created_at: string };
    };
    return {
      apiVersion: SANDBOX_API_VERSION,
      kind: 'SandboxSnapshotResult',
      snapshotID: out.checkpoint.id,
      ...(out.checkpoint.name ? { name: out.checkpoint.name } : {}),
      nodeName: e.node,
      creationTimestamp: kubeTime(out.checkpoint.created_at),
    };
  }

  /**
   * Whether a hibernated sandbox must resume elsewhere, and why: its node is gone (no feed) or draining (it wakes
   * nothing; docs/sandboxd.md "Draining"). Undefined: its own node wakes it.
   */
  private gone(e: SandboxEntry): MovedBecause | undefined {
    if (!this.store.nodeAvailable(e.node)) return 'unavailable';
    return this.fleet?.isDraining(e.node) === true ? 'draining' : undefined;
  }

  private async exec(entry: SandboxEntry, opts: SandboxExecOptions, onMoved: (moved: Moved) => void) {
    let e = entry;
    // Idle-suspended on a node that is gone or draining: the command wakes it elsewhere (its own node would).
    const away = e.phase === 'Suspended' && e.hibernationCheckpoint ? this.gone(e) : undefined;
    if (away) {
      onMoved(await this.resumeElsewhere(e, e.hibernationCheckpoint!, away));
      e = this.store.get(e.key) ?? e;
    }
    const timeout = opts.timeoutSeconds ?? 60;
    const body = {
      argv: opts.command,
      ...(opts.workingDir ? { cwd: opts.workingDir } : {}),
      ...(opts.env ? { env: opts.env } : {}),
      timeout_seconds: timeout,
    };
    const run = (at: SandboxEntry) =>
      this.call(at, 'exec', body, (timeout + 10) * 1000) as Promise<{
        exit_code: number;
        stdout: string;
        stderr: string;
      }>;
    let out;
    try {
      out = await run(e);
    } catch (err) {
      // Its own node could not wake it (full, or draining before the fleet saw it): the command wakes it where a copy
      // of its record is, and runs there.
      // An exec that reached the guest never ends in a 429, so the command has not run.
      const why = e.phase === 'Suspended' && e.hibernationCheckpoint ? movedBecause(err) : undefined;
      if (why !== 'full' && why !== 'draining') throw err;
      onMoved(await this.resumeElsewhereOr(err, e, e.hibernationCheckpoint!, why));
      out = await run(this.store.get(e.key) ?? e);
    }
    return {
      apiVersion: SANDBOX_API_VERSION,
      kind: 'SandboxExecResult',
      exitCode: out.exit_code,
      stdout: out.stdout,
      stderr: out.stderr,
    };
  }
}

/**
 * Whether a node's refusal to wake a hibernated sandbox lets it resume elsewhere: the node is unreachable, or it
 * answered 429: it runs --max-claims sandboxes (`sandboxd.at-capacity`), or it started draining before the fleet saw
 * it (`sandboxd.draining`).
 */
function movedBecause(err: unknown): MovedBecause | undefined {
  if (err instanceof NodeUnreachableError) return 'unavailable';
  if (!(err instanceof NodeHttpError) || err.status !== 429) return undefined;
  if (err.nodeCode === 'sandboxd.draining') return 'draining';
  return err.nodeCode === 'sandboxd.at-capacity' ? 'full' : undefined;
}
