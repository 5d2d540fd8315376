/**
 * The lifecycle verbs' Events, as pure functions (src/apiserver/sandboxes/verb-events.ts): a pause the node made a
 * hibernation is SandboxHibernated, not SandboxPaused (the aggregated tests' nodes pause in memory, so only this
 * covers it); a failed verb is a Warning naming the Status reason; exec records nothing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { conflict } from '../../src/apiserver/status.js';
import { SANDBOXES } from '../../src/apiserver/sandboxes/create.js';
import { verbFailedEvent, verbSucceededEvent } from '../../src/apiserver/sandboxes/verb-events.js';

describe('lifecycle verb Events', () => {
  it('names the pause by what the node did, and who asked', () => {
    const mem = verbSucceededEvent({ verb: 'pause', mode: 'Memory' }, 'alice');
    assert.deepEqual([mem.type, mem.reason, mem.action], ['Normal', 'SandboxPaused', 'Pause']);
    const hib = verbSucceededEvent({ verb: 'pause', mode: 'Hibernate' }, 'alice');
    assert.deepEqual([hib.type, hib.reason, hib.action], ['Normal', 'SandboxHibernated', 'Hibernate']);
    assert.match(hib.note, /^Hibernated by alice/);
  });

  it('a failed verb is a Warning with the Status reason; exec has none', () => {
    const f = conflict(SANDBOXES, 'sb', 'sandbox x is paused: resume it first');
    const ev = verbFailedEvent('fork', 'bob', f)!;
    assert.deepEqual([ev.type, ev.reason, ev.action], ['Warning', 'SandboxForkFailed', 'Fork']);
    assert.match(ev.note, /^Fork requested by bob failed \(Conflict\): .*resume it first/);
    assert.equal(verbFailedEvent('exec', 'bob', f), undefined);
  });
});
