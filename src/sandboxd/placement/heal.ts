import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxError } from '../../errors.js';
import { ensureGuestImage, silentProgress } from '../../guest/index.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import { hostHasHardwareKvm, templateFromImage, type MicrovmDriver, type Template } from '../../vmm/index.js';
import type { CheckpointRecord, Checkpoints } from '../checkpoints.js';
import { SIZE_TIERS } from '../pool-key.js';
import { rejectRecord as bad, unpackRecord } from './blob.js';
import { PeerClient } from './peer-client.js';
import { digestFile, MAX_SMALL_FILE_BYTES, type RecordMeta } from './record.js';

/**
 * Peer heal (docs/placement.md, tier 3): pull a checkpoint this node lacks from an owner, check it, publish it
 * into the local store in one rename and serve it from then on (this node is an owner after that). One pull per
 * id at a time (a second claim for it waits for the first), at most `maxConcurrent` pulls per node (more is a 503
 * the caller retries), one time budget for the whole heal across the owners it tries; a pull that fails at any point
 * (the owner died, the stream was cut or hostile) removes its staging directory and the next owner is tried.
 */
export interface HealOptions {
  store: Checkpoints;
  driver: MicrovmDriver;
  client: PeerClient;
  maxConcurrent: number;
  budgetMs: number;
  /** Cap on a record's declared file sizes together. */
  maxRecordBytes: number;
  logger?: Logger;
}

export interface HealResult {
  checkpoint: CheckpointRecord;
  owner: string;
  bytes: number;
  ms: number;
}

/** The device state is kilobytes to a few MiB; more is not a checkpoint of ours. */
const MAX_STATE_BYTES = 256 << 20;

export class Healer {
  private readonly inflight = new Map<string, Promise<HealResult>>();
  private readonly log: Logger;
  readonly counters = { ok: 0, failed: 0, pulls: 0, pullFailures: 0, bytes: 0, busy: 0 };

  constructor(private readonly opts: HealOptions) {
    this.log = opts.logger ?? silentLogger;
  }

  get active(): number {
    return this.inflight.size;
  }

  /** Heal `id` from the first of `owners` that serves it whole; joins a heal of the same id already running. */
  heal(id: string, owners: readonly string[]): Promise<HealResult> {
    const running = this.inflight.get(id);
    if (running) return running;
    if (this.inflight.size >= this.opts.maxConcurrent) {
      this.counters.busy++;
      throw new SandboxError(
        'placement.busy',
        `${this.inflight.size} checkpoint pulls are running on this node already`,
        {
          hint: 'retry after the Retry-After seconds, or claim on an owner',
        },
      );
    }
    const p = this.run(id, owners).finally(() => this.inflight.delete(id));
    this.inflight.set(id, p);
    return p;
  }

  private async run(id: string, owners: readonly string[]): Promise<HealResult> {
    const t0 = performance.now();
    const started = Date.now();
    const budget = AbortSignal.timeout(this.opts.budgetMs);
    const failures: string[] = [];
    for (const owner of owners) {
      if (budget.aborted) break;
      try {
        const { checkpoint, bytes } = await this.pull(id, owner, budget, started);
        const ms = performance.now() - t0;
        this.counters.ok++;
        this.counters.bytes += bytes;
        this.log.info({ checkpoint: id, owner, bytes, ms: Math.round(ms) }, 'checkpoint pulled from a peer');
        return { checkpoint, owner, bytes, ms };
      } catch (err) {
        if (err instanceof SandboxError && err.code === 'placement.deleted') throw err;
        this.counters.pullFailures++;
        const why = budget.aborted ? `the heal budget of ${this.opts.budgetMs} ms ran out` : errText(err);
        failures.push(`${owner}: ${why}`);
        this.log.warn({ checkpoint: id, owner, err }, 'pulling a checkpoint from a peer failed; nothing was published');
      }
    }
    this.counters.failed++;
    throw new SandboxError(
      'placement.heal-failed',
      `checkpoint ${id} could not be pulled: ${failures.join('; ') || 'no owner'}`,
      {
        hint: 'no partial record was kept; retry the claim (another owner may serve it), or claim on an owner',
      },
    );
  }

  private async pull(
    id: string,
    owner: string,
    signal: AbortSignal,
    started: number,
  ): Promise<{ checkpoint: CheckpointRecord; bytes: number }> {
    this.counters.pulls++;
    const staging = await this.opts.store.stagingDir();
    try {
      const res = await this.opts.client.open(owner, 'GET', `/v1/checkpoints/${encodeURIComponent(id)}/blob`, {
        signal,
      });
      if (res.statusCode !== 200) {
        const text = await PeerClient.errorText(res);
        throw new SandboxError('placement.heal-failed', `${owner} answered ${res.statusCode}: ${text}`);
      }
      const { meta, bytes } = await unpackRecord(res, staging, {
        maxTotalBytes: this.opts.maxRecordBytes,
        check: (m) => expectShape(m, id),
      });
      const exportDir = join(staging, 'export');
      const template = await localTemplate(exportDir, meta, this.opts.driver);
      await writeFile(join(exportDir, 'template.json'), JSON.stringify(template, null, 2), { mode: 0o600 });
      const files = await Promise.all(
        meta.files.map((f) => (f.path === 'template.json' ? digestFile(exportDir, f.path) : f)),
      );
      const checkpoint = await this.opts.store.publish(
        {
          id: meta.id,
          ...(meta.name ? { name: meta.name } : {}),
          sandboxId: meta.sandbox_id,
          ...(meta.claim_ref ? { claimRef: meta.claim_ref } : {}),
          ...(meta.kind ? { kind: meta.kind } : {}),
          key: meta.key,
          createdAt: meta.created_at,
          files,
          origin: meta.origin,
          via: [...meta.via, owner],
        },
        exportDir,
        started,
      );
      return { checkpoint, bytes };
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Checked as soon as meta.json arrives, before any large file is read. */
function expectShape(meta: RecordMeta, id: string): void {
  if (meta.id !== id) bad(`asked for ${id}, the peer sent ${meta.id}`);
  const tier = SIZE_TIERS[meta.key.size];
  const size = (p: string) => meta.files.find((f) => f.path === p)!.size;
  if (size('mem') < tier.memoryMiB * 2 ** 20 || size('mem') > 64 * 2 ** 30)
    bad(`export/mem is ${size('mem')} bytes; a ${meta.key.size} VM has at least ${tier.memoryMiB} MiB`);
  if (size('state') > MAX_STATE_BYTES) bad(`export/state is ${size('state')} bytes (at most ${MAX_STATE_BYTES})`);
  if (size('template.json') > MAX_SMALL_FILE_BYTES) bad(`export/template.json is larger than ${MAX_SMALL_FILE_BYTES}`);
}

/**
 * The template.json this node clones the record with. Nothing that reaches the host is taken from the peer: the
 * guest image paths and the kernel command line are this node's own (the peer's image files must have the same
 * content), and the VM's shape and network lane must be the ones its pool key names, so a record cannot turn a
 * NIC-less sandbox into one with a network or change its size.
 */
async function localTemplate(dir: string, meta: RecordMeta, driver: MicrovmDriver): Promise<Omit<Template, 'dir'>> {
  let sent: Partial<Template>;
  try {
    sent = JSON.parse(await readFile(join(dir, 'template.json'), 'utf8')) as Partial<Template>;
  } catch (err) {
    bad(`export/template.json is not JSON: ${errText(err)}`);
  }
  const { key } = meta;
  const img = await ensureGuestImage(key.template, { progress: silentProgress }).catch(() =>
    bad(`the checkpoint was made from template ${key.template}, which this node does not have`),
  );
  const spec = templateFromImage(img);
  // Guest image files live in directories named by their content hash (…/kernel-<hash>/vmlinux): the same last two
  // path segments are the same content, wherever each node keeps its cache. (A checkpoint's image.hash is its source
  // template's, not the image's, so it cannot be compared.) A checkpoint of a clone names no kernel or initramfs (the
  // clone was restored from RAM and device state, not booted, and so is every clone of the record); the root disk,
  // which a clone opens, must be the same one, or absent on both sides.
  const named = (p: string | undefined) => (p ? p.split('/').slice(-2).join('/') : '');
  for (const part of ['kernel', 'initramfs', 'rootfs'] as const)
    if ((part === 'rootfs' || sent.image?.[part]) && named(sent.image?.[part]) !== named(spec.image[part]))
      bad(
        `the checkpoint's guest ${part} is ${named(sent.image?.[part]) || 'none'}; this node's ${key.template} has ${named(spec.image[part]) || 'none'}`,
      );
  const tier = SIZE_TIERS[key.size];
  const memoryMiB = Math.max(tier.memoryMiB, spec.memoryMiB ?? 0);
  if (sent.memoryMiB !== memoryMiB || sent.vcpus !== tier.vcpus)
    bad(
      `template.json says ${sent.memoryMiB} MiB / ${sent.vcpus} vCPUs; a ${key.size} VM is ${memoryMiB} / ${tier.vcpus}`,
    );
  if (sent.network !== key.net) bad(`template.json says network ${sent.network}; the key says ${key.net}`);
  if (sent.accel !== 'tcg' && !(sent.accel === 'kvm' && hostHasHardwareKvm()))
    bad(`template.json says accel ${sent.accel}, which this host cannot run`);
  if (typeof sent.hash !== 'string' || !/^[0-9a-f]{1,64}$/.test(sent.hash)) bad('template.json: hash is malformed');
  const mem = await stat(join(dir, 'mem'));
  if (mem.size !== memoryMiB * 2 ** 20) bad(`export/mem is ${mem.size} bytes; the VM has ${memoryMiB} MiB`);
  return {
    name: `${key.template}@${meta.id}`,
    hash: sent.hash,
    memFile: join(dir, 'mem'),
    stateFile: join(dir, 'state'),
    memoryMiB,
    vcpus: tier.vcpus,
    network: key.net,
    accel: sent.accel,
    image: spec.image,
    cmdline: driver.kernelCmdline({ image: spec.image, network: key.net }, sent.accel),
    createdAt: meta.created_at,
    bootMs: 0,
  };
}
