/**
 * What `kubectl logs` shows for a microVM pod. A microVM has no single container process whose stdout the node
 * could capture, so the container log is what the virtual kubelet writes about the pod: lifecycle lines (VM bound,
 * adopted after a restart, replaced, released). Exec sessions are not in it, neither their commands nor what they
 * read or print: on a kubelet `kubectl logs` is the container's own output, and an exec's input and output belong
 * to whoever ran it (whoever may read pod logs need not see them). Stored per pod in the CRI log format
 * (`<RFC 3339 nano> <stdout|stderr> <F|P> <text>`), so `timestamps`, `sinceSeconds`, `sinceTime`, `tailLines`,
 * `limitBytes` and `follow` behave as on a real kubelet.
 */
import { createReadStream, existsSync, mkdirSync, renameSync, rmSync, statSync, watch, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Writable } from 'node:stream';

export type LogStream = 'stdout' | 'stderr';

export interface LogQuery {
  follow?: boolean;
  timestamps?: boolean;
  tailLines?: number;
  sinceTime?: Date;
  limitBytes?: number;
  signal?: AbortSignal;
}

/** A log file is rotated (one previous generation kept, not served) past this size. */
const MAX_LOG_BYTES = 8 << 20;

export class PodLogs {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  /** One file per pod incarnation (namespace, name, uid), like /var/log/pods. */
  path(namespace: string, name: string, uid: string): string {
    return join(this.dir, `${namespace}_${name}_${uid}.log`);
  }

  /** Append text; complete lines become `F` records, a trailing partial line a `P` record. */
  append(file: string, stream: LogStream, text: string | Buffer): void {
    const s = typeof text === 'string' ? text : text.toString('utf8');
    if (!s) return;
    const ts = nanoTimestamp();
    const lines = s.split('\n');
    const last = lines.pop() ?? '';
    let out = '';
    for (const l of lines) out += `${ts} ${stream} F ${l.replace(/\r$/, '')}\n`;
    if (last) out += `${ts} ${stream} P ${last}\n`;
    try {
      if (existsSync(file) && statSync(file).size > MAX_LOG_BYTES) renameSync(file, `${file}.1`);
      appendFileSync(file, out);
    } catch {
      // The pod's log directory went away (pod deleted); transcripts are best effort.
    }
  }

  /** A lifecycle line from the node (always stdout, always a full line). */
  event(file: string, message: string): void {
    this.append(file, 'stdout', `[sandboxd] ${message}\n`);
  }

  remove(file: string): void {
    rmSync(file, { force: true });
    rmSync(`${file}.1`, { force: true });
  }

  /** Write the log to `out` per the kubelet's query semantics; with `follow`, keep going until the signal aborts. */
  async serve(file: string, out: Writable, q: LogQuery): Promise<void> {
    let budget = q.limitBytes ?? Number.POSITIVE_INFINITY;
    const emit = (record: string): boolean => {
      const m = /^(\S+) (stdout|stderr) ([FP]) (.*)$/.exec(record);
      if (!m) return true;
      const [, ts = '', , tag, text = ''] = m;
      if (q.sinceTime && Date.parse(ts) < q.sinceTime.getTime()) return true;
      let line = `${q.timestamps ? `${ts} ` : ''}${text}${tag === 'F' ? '\n' : ''}`;
      if (Buffer.byteLength(line) > budget) line = Buffer.from(line).subarray(0, budget).toString('utf8');
      budget -= Buffer.byteLength(line);
      out.write(line);
      return budget > 0;
    };
    if (!existsSync(file)) {
      if (!q.follow) return;
      mkdirSync(this.dir, { recursive: true });
      appendFileSync(file, '');
    }
    let records = await readRecords(file, 0);
    if (q.tailLines !== undefined)
      records = { ...records, lines: records.lines.slice(Math.max(0, records.lines.length - q.tailLines)) };
    for (const r of records.lines) if (!emit(r)) return;
    if (!q.follow) return;
    let offset = records.end;
    await new Promise<void>((resolve) => {
      let busy = false;
      let again = false;
      const poll = async (): Promise<void> => {
        if (busy) {
          again = true;
          return;
        }
        busy = true;
        try {
          do {
            again = false;
            let size = 0;
            try {
              size = statSync(file).size;
            } catch {
              return finish();
            }
            if (size < offset) offset = 0; // rotated
            if (size > offset) {
              const next = await readRecords(file, offset);
              offset = next.end;
              for (const r of next.lines) if (!emit(r)) return finish();
            }
          } while (again);
        } finally {
          busy = false;
        }
      };
      const watcher = watch(file, () => void poll());
      const timer = setInterval(() => void poll(), 500);
      const finish = () => {
        watcher.close();
        clearInterval(timer);
        resolve();
      };
      out.once('close', finish);
      if (q.signal?.aborted) finish();
      q.signal?.addEventListener('abort', finish, { once: true });
    });
  }
}

/** Whole records from byte `start`; `end` is the offset after the last complete record. */
async function readRecords(file: string, start: number): Promise<{ lines: string[]; end: number }> {
  const lines: string[] = [];
  let end = start;
  const rl = createInterface({ input: createReadStream(file, { start }), crlfDelay: Infinity });
  for await (const line of rl) {
    lines.push(line);
    end += Buffer.byteLength(line) + 1;
  }
  // The last line may be incomplete if a writer raced us; appendFileSync writes whole records, so accept it.
  return { lines, end: Math.min(end, statSync(file).size) };
}

function nanoTimestamp(): string {
  const now = new Date();
  const iso = now.toISOString(); // ms precision
  const nanos = String(Number(process.hrtime.bigint() % 1_000_000n)).padStart(6, '0');
  return `${iso.slice(0, -1)}${nanos}Z`;
}
