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
 * `go tool pprof -top` of a profile (or, with `base`, of the difference from it), the first `lines` rows; `cum`
 * sorts by cumulative time. Needs Go on PATH (the toolchain that builds the guest agent).
 */
export async function pprofTop(
  file: string,
  opts: { base?: string; cum?: boolean; lines?: number; focus?: string } = {},
): Promise<string> {
  const args = ['tool', 'pprof', '-top', `-nodecount=${opts.lines ?? 40}`];
  if (opts.cum) args.push('-cum');
  if (opts.focus) args.push(`-focus=${opts.focus}`);
  if (opts.base) args.push(`-diff_base=${opts.base}`);
  args.push(file);
  const { stdout } = await run('go', args, { maxBuffer: 16 * 2 ** 20 });
  return stdout;
}
