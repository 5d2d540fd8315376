/**
 * What `sbx up --layout aggregated` asks for on behalf of the e2b API (docs/e2b.md "Template alias table"): the
 * SDK's default template `base` on the egress lane (e2b's sandboxes have the internet; old SDKs send
 * `allow_internet_access: true` on every create), and `--warm` VMs kept warm on that lane per node, beside the
 * NIC-less pool kubectl's sandboxes come from. The CRD layout serves no e2b API and keeps no such pool.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { platformOptions, type UpOptions } from '../../src/cli/commands/platform.js';
import { e2bTemplatesOf, poolsFlag } from '../../src/cli/platform.js';

const up = (layout: string): UpOptions => ({
  layout,
  nodes: '1',
  warm: '2',
  simulatedNodes: '0',
  realNodes: '0',
  fsync: true,
  logLevel: 'error',
});

describe('sbx up: the e2b pools', () => {
  it('aggregated: base is sandbox/base on the egress lane, kept warm there as --warm says', () => {
    const { options } = platformOptions(up('aggregated'));
    assert.equal(options.e2bWarm, 2);
    assert.deepEqual(poolsFlag(options), ['--pools=sandbox/base=2,sandbox/base:egress=2']);
    const table = e2bTemplatesOf(options);
    assert.deepEqual(table?.base, { template: 'sandbox/base', net: 'egress' });
    assert.deepEqual(table?.['base-offline'], { template: 'sandbox/base' });
  });

  it('crd: no e2b API, no egress pool', () => {
    const { options } = platformOptions(up('crd'));
    assert.equal(options.e2bWarm, undefined);
    assert.deepEqual(poolsFlag(options), ['--pools=sandbox/base=2']);
    assert.equal(e2bTemplatesOf(options), undefined);
  });
});
