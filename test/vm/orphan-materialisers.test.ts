/**
 * What a crash leaves of a template save (src/vmm/process.ts reapOrphanMaterialisers): a `mat-*` run dir and its
 * process, which has no VM record. The next start kills the process, found by the run dir in its argv, and removes
 * the dir; a process naming another run root is left alone. A stand-in process plays QEMU (its argv names the
 * dir the way QEMU's `-qmp unix:<run dir>/qmp.sock` does).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { reapOrphanMaterialisers } from '../../src/vmm/process.js';
import { eventually } from '../support/eventually.js';

const stand = (socket: string): ChildProcess =>
  spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', `unix:${socket}`], { stdio: 'ignore' });
const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

describe('orphan template saves', () => {
  const kids: ChildProcess[] = [];
  const dirs: string[] = [];
  after(async () => {
    for (const k of kids) if (!exited(k)) k.kill('SIGKILL');
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('kills the process of a mat-* run dir and removes the dir; leaves other roots alone', async () => {
    const root = await mkdtemp(join(tmpdir(), 'sbx-mat-'));
    const other = await mkdtemp(join(tmpdir(), 'sbx-mat-other-'));
    dirs.push(root, other);
    for (const d of [join(root, 'mat-abc'), join(other, 'mat-abc'), join(root, 'vm-keep')]) mkdirSync(d);
    const orphan = stand(join(root, 'mat-abc', 'qmp.sock'));
    const elsewhere = stand(join(other, 'mat-abc', 'qmp.sock'));
    kids.push(orphan, elsewhere);
    await new Promise((r) => setTimeout(r, 300)); // argv is readable once the process runs
    assert.equal(reapOrphanMaterialisers(root), 1);
    await eventually(() => exited(orphan), { until: (x) => x, timeoutMs: 5000, what: 'the orphan killed' });
    assert.equal(orphan.signalCode, 'SIGKILL');
    assert.equal(existsSync(join(root, 'mat-abc')), false);
    assert.equal(existsSync(join(root, 'vm-keep')), true, 'a VM run dir is not a template save');
    assert.equal(exited(elsewhere), false, 'another run root is not this node’s');
    assert.equal(reapOrphanMaterialisers(join(root, 'missing')), 0);
  });
});
