import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SandboxError } from '../../errors.js';
import { cachedArtifact, contentHash, runStep, type Progress } from './cache.js';

/** The Go agent's module directory (agent/ at the repo root). */
export const AGENT_SRC = fileURLToPath(new URL('../../../agent/', import.meta.url));

export interface AgentArtifact {
  binary: string;
  hash: string;
}

function goBinary(): string {
  for (const p of [process.env.GO, '/usr/local/go/bin/go', '/usr/bin/go']) {
    if (!p) continue;
    try {
      execFileSync(p, ['version'], { stdio: 'ignore' });
      return p;
    } catch {
      /* next */
    }
  }
  try {
    execFileSync('go', ['version'], { stdio: 'ignore' });
    return 'go';
  } catch {
    throw new SandboxError('guest.go-missing', 'the Go toolchain is needed to build the guest agent', {
      hint: 'install Go >= 1.26 (scripts/bootstrap.sh) or set GO=/path/to/go',
    });
  }
}

/**
 * The hash of what goes into the binary: Go sources of every package in the module, subdirectories included (not
 * `_test.go`, so a test-only change rebuilds no guest image), and go.mod/go.sum, which pin the dependencies the build
 * fetches through the Go module proxy.
 */
export function agentHash(go = goBinary()): string {
  const files = (readdirSync(AGENT_SRC, { recursive: true }) as string[])
    .filter((f) => (f.endsWith('.go') && !f.endsWith('_test.go')) || f === 'go.mod' || f === 'go.sum')
    .sort();
  const goVersion = execFileSync(go, ['version'], { encoding: 'utf8' }).trim();
  return contentHash(['agent-v1', goVersion, ...files.flatMap((f) => [f, readFileSync(join(AGENT_SRC, f))])]);
}

/** The static guest agent binary (CGO_ENABLED=0), built once per source hash. */
export async function ensureAgent(opts: { progress?: Progress } = {}): Promise<AgentArtifact> {
  const go = goBinary();
  const hash = agentHash(go);
  const dir = await cachedArtifact(
    'agent',
    hash,
    async (tmp) => {
      await runStep(
        'agent',
        go,
        ['build', '-trimpath', '-buildvcs=false', '-ldflags=-s -w -buildid=', '-o', join(tmp, 'sandbox-agent'), '.'],
        {
          cwd: AGENT_SRC,
          env: { ...process.env, CGO_ENABLED: '0', GOOS: 'linux', GOARCH: 'amd64', GOFLAGS: '-mod=mod' },
          progress: opts.progress,
        },
      );
    },
    { progress: opts.progress },
  );
  return { binary: join(dir, 'sandbox-agent'), hash };
}
