/**
 * The labels of sandbox-apiserver's request and watch series (src/apiserver/server.ts): bounded whatever URLs or
 * user names clients send. Before, the resource and subresource came from the URL as given (denied and unknown
 * paths are counted too) and every ServiceAccount was a `client` value of its own, so any client could add series
 * without bound.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseRequestInfo, requestUrl } from '../../src/apiserver/request-info.js';
import type { RestStorage } from '../../src/apiserver/resource-handler.js';
import { requestSeriesLabels, watchClientLabel } from '../../src/apiserver/server.js';

const storages = new Map([
  [
    'agents.x-k8s.io/v1beta1/sandboxes',
    { descriptor: { subresources: [{ name: 'pause' }, { name: 'fork' }] } } as unknown as RestStorage<unknown>,
  ],
]);
const labels = (method: string, path: string) =>
  requestSeriesLabels(parseRequestInfo(method, requestUrl({ url: path })), storages);

describe('request series labels', () => {
  it('name a served resource and action as the URL does', () => {
    assert.deepEqual(labels('GET', '/apis/agents.x-k8s.io/v1beta1/namespaces/a/sandboxes'), {
      resource: 'sandboxes',
      subresource: '',
    });
    assert.deepEqual(labels('POST', '/apis/agents.x-k8s.io/v1beta1/namespaces/a/sandboxes/x/pause'), {
      resource: 'sandboxes',
      subresource: 'pause',
    });
  });

  it('fold every resource and subresource this server does not serve into unknown', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      for (const path of [
        `/apis/agents.x-k8s.io/v1beta1/namespaces/a/r${i}`,
        `/apis/other.example/v${i}/namespaces/a/sandboxes`,
        `/apis/agents.x-k8s.io/v1beta1/namespaces/a/sandboxes/x/s${i}`,
        `/apis/agents.x-k8s.io/v1beta1/namespaces/a/r${i}/x/s${i}`,
      ])
        seen.add(JSON.stringify(labels('GET', path)));
    }
    assert.deepEqual([...seen].sort(), [
      JSON.stringify({ resource: 'sandboxes', subresource: 'unknown' }),
      JSON.stringify({ resource: 'unknown', subresource: '' }),
      JSON.stringify({ resource: 'unknown', subresource: 'unknown' }),
    ]);
    assert.deepEqual(labels('GET', '/version'), { resource: '', subresource: '' });
  });

  it('count every ServiceAccount as one watch client', () => {
    assert.equal(watchClientLabel('system:serviceaccount:team-a:agent-7'), 'system:serviceaccount');
    assert.equal(watchClientLabel('system:kube-controller-manager'), 'system:kube-controller-manager');
    assert.equal(watchClientLabel('alice'), 'other');
  });
});
