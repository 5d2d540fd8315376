/**
 * A Go server's CPU profile (net/http/pprof's /debug/pprof/profile, served by kube-apiserver with --profiling) and
 * its summary through `go tool pprof`, so a bench can say which part of kube-apiserver does the work, not just how
 * much CPU it used.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { promisify } from 'node:util';
import type { ClusterHandle } from '../../src/cluster/index.js';

const run = promisify(execFile);

/** Record `seconds` of kube-apiserver's CPU profile into `file` (the admin client cert authorises it). */
export async function apiserverCpuProfile(cluster: ClusterHandle, seconds: number, file: string): Promise<void> {
  const url = new URL(`/debug/pprof/profile?seconds=${seconds}`, cluster.server);
  const body = await new Promise<Buffer>((resolve, reject) => {
    const req = request(
      url,
      {
        ca: readFileSync(cluster.pki.ca.cert),
        cert: readFileSync(cluster.pki.admin.cert),
        key: readFileSync(cluster.pki.admin.key),
        timeout: (seconds + 60) * 1000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const b = Buffer.concat(chunks);
          if (res.statusCode !== 200)
            reject(
              new Error(
                `profile: HTTP ${res.statusCode} ${b.toString('utf8', 0, 200)} (is the cluster started with apiserverProfiling?)`,
              ),
            );
          else resolve(b);
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('profile: timed out')));
    req.on('error', reject);
    req.end();
  });
  await writeFile(file, body);
}

/**
 * `go tool pprof -top` of a profile, the first `lines` rows; `cum` sorts by cumulative time. Needs Go on PATH (the
 * toolchain that builds the guest agent).
 */
export async function pprofTop(file: string, opts: { cum?: boolean; lines?: number } = {}): Promise<string> {
  const args = ['tool', 'pprof', '-top', `-nodecount=${opts.lines ?? 40}`];
  if (opts.cum) args.push('-cum');
  args.push(file);
  const { stdout } = await run('go', args, { maxBuffer: 16 * 2 ** 20 });
  return stdout;
}

/** Function -> cumulative CPU ms of its `lines` largest, read from `go tool pprof -top -cum` (values in s, ms, us, ...). */
export async function pprofCumulativeMs(file: string, lines: number): Promise<Map<string, number>> {
  const unit = (v: string) => {
    const m = /^([\d.]+)(s|ms|us|µs|ns|min|h)?$/.exec(v);
    if (!m) return NaN;
    const f = { s: 1000, ms: 1, us: 1e-3, µs: 1e-3, ns: 1e-6, min: 60_000, h: 3_600_000 }[m[2] ?? 's'] ?? NaN;
    return Number(m[1]) * f;
  };
  const out = new Map<string, number>();
  for (const line of (await pprofTop(file, { lines, cum: true })).split('\n')) {
    const m = /^\s*(\S+)\s+[\d.]+%\s+[\d.]+%\s+(\S+)\s+[\d.]+%\s+(.+)$/.exec(line);
    if (!m) continue;
    const ms = unit(m[2]!);
    if (Number.isFinite(ms)) out.set(m[3]!.trim(), ms);
  }
  return out;
}
