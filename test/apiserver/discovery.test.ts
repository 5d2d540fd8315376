import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import {
  aggregatedContentType,
  aggregatedDiscovery,
  apiGroup,
  apiGroupList,
  apiResourceList,
  createDiscoveryHandler,
} from '../../src/apiserver/discovery.js';
import type { ResourceDescriptor } from '../../src/apiserver/types.js';
import { sandboxesDescriptor } from './descriptors.js';

const G = 'agents.x-k8s.io';
const V = 'v1beta1';
const descriptors = [sandboxesDescriptor()];
const handle = createDiscoveryHandler(descriptors);
/** What kube-aggregator 1.36 sends (client-go AcceptV2 + "," + AcceptV2Beta1). */
const AGGREGATOR_ACCEPT = `${aggregatedContentType('v2')},${aggregatedContentType('v2beta1')}`;
const sha512 = (s: string) => createHash('sha512').update(s).digest('hex').toUpperCase();

function get(url: string, accept?: string, ifNoneMatch?: string) {
  const res = handle({ url, accept, ifNoneMatch });
  assert.ok(res, `${url} is a discovery path`);
  return res;
}

describe('legacy discovery documents', () => {
  it('lists the group with its preferred version', () => {
    const gv = { groupVersion: `${G}/${V}`, version: V };
    assert.deepEqual(apiGroupList(descriptors), {
      kind: 'APIGroupList',
      apiVersion: 'v1',
      groups: [{ name: G, versions: [gv], preferredVersion: gv }],
    });
    assert.deepEqual(apiGroup(descriptors, G), {
      kind: 'APIGroup',
      apiVersion: 'v1',
      name: G,
      versions: [gv],
      preferredVersion: gv,
    });
    assert.equal(apiGroup(descriptors, 'apps'), undefined);
  });

  it('lists the resource and its actions with verbs [create], the kind of their body and the parent scope', () => {
    const list = apiResourceList(descriptors, G, V);
    assert.deepEqual(list, {
      kind: 'APIResourceList',
      apiVersion: 'v1',
      groupVersion: `${G}/${V}`,
      resources: [
        {
          name: 'sandboxes',
          singularName: 'sandbox',
          namespaced: true,
          kind: 'Sandbox',
          verbs: ['create', 'delete', 'get', 'list', 'watch'],
          shortNames: ['sbx'],
          categories: ['all'],
        },
        { name: 'sandboxes/fork', singularName: '', namespaced: true, kind: 'SandboxForkRequest', verbs: ['create'] },
        { name: 'sandboxes/pause', singularName: '', namespaced: true, kind: 'SandboxPauseRequest', verbs: ['create'] },
      ],
    });
    assert.equal(apiResourceList(descriptors, G, 'v1'), undefined);
  });

  it('gives a cluster-scoped resource cluster-scoped subresources and omits empty name lists', () => {
    const clustered: ResourceDescriptor = {
      ...sandboxesDescriptor(),
      namespaced: false,
      shortNames: [],
      categories: [],
    };
    const [parent, ...subs] = apiResourceList([clustered], G, V)!.resources;
    assert.equal(parent!.namespaced, false);
    assert.ok(!('shortNames' in parent!) && !('categories' in parent!));
    assert.deepEqual(
      subs.map((s) => s.namespaced),
      [false, false],
    );
    assert.equal(aggregatedDiscovery([clustered]).items[0]!.versions[0]!.resources[0]!.scope, 'Cluster');
  });

  it('refuses descriptors that cannot be served together', () => {
    const d = sandboxesDescriptor();
    assert.throws(() => apiGroupList([d, d]), /described twice/);
    assert.throws(() => apiGroupList([{ ...d, verbs: [] }]), /at least one verb/);
    assert.throws(() => apiGroupList([{ ...d, subresources: [d.subresources[0]!, d.subresources[0]!] }]), /twice/);
  });
});

describe('aggregated discovery', () => {
  it('describes the resource, its actions (response kind and accepted body) and freshness', () => {
    const doc = aggregatedDiscovery(descriptors);
    assert.equal(doc.kind, 'APIGroupDiscoveryList');
    assert.equal(doc.apiVersion, 'apidiscovery.k8s.io/v2');
    assert.equal(doc.items.length, 1);
    const [version] = doc.items[0]!.versions;
    assert.equal(doc.items[0]!.metadata.name, G);
    assert.equal(version!.version, V);
    assert.equal(version!.freshness, 'Current');
    const gvk = (kind: string) => ({ group: G, version: V, kind });
    assert.deepEqual(version!.resources, [
      {
        resource: 'sandboxes',
        responseKind: gvk('Sandbox'),
        scope: 'Namespaced',
        singularResource: 'sandbox',
        verbs: ['create', 'delete', 'get', 'list', 'watch'],
        shortNames: ['sbx'],
        categories: ['all'],
        subresources: [
          {
            subresource: 'fork',
            responseKind: gvk('SandboxForkResult'),
            acceptedTypes: [gvk('SandboxForkRequest')],
            verbs: ['create'],
          },
          {
            subresource: 'pause',
            responseKind: gvk('Sandbox'),
            acceptedTypes: [gvk('SandboxPauseRequest')],
            verbs: ['create'],
          },
        ],
      },
    ]);
    assert.equal(aggregatedDiscovery(descriptors, 'v2beta1').apiVersion, 'apidiscovery.k8s.io/v2beta1');
  });
});

describe('discovery handler', () => {
  it('answers the aggregator with v2, the exact content type, a SHA-512 ETag and Vary', () => {
    const res = get('/apis', AGGREGATOR_ACCEPT);
    assert.equal(res.status, 200);
    assert.equal(res.headers['Content-Type'], 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList');
    assert.deepEqual(JSON.parse(res.body!), aggregatedDiscovery(descriptors));
    assert.equal(res.headers.Etag, `"${sha512(res.body!)}"`);
    assert.equal(res.headers.Vary, 'Accept');
    assert.equal(res.headers['Cache-Control'], 'public');
  });

  it('answers 304 without a body when If-None-Match carries the current ETag', () => {
    const etag = get('/apis', AGGREGATOR_ACCEPT).headers.Etag!;
    const res = get('/apis', AGGREGATOR_ACCEPT, etag);
    assert.equal(res.status, 304);
    assert.equal(res.body, undefined);
    assert.equal(res.headers.Etag, etag);
    assert.equal(get('/apis', AGGREGATOR_ACCEPT, `W/${etag}, "other"`).status, 304);
    assert.equal(get('/apis', AGGREGATOR_ACCEPT, '"0123"').status, 200);
    // The legacy representation has its own ETag: the v2 one does not make it 304.
    assert.equal(get('/apis', 'application/json', etag).status, 200);
  });

  it('follows the client order and q-values between v2 and v2beta1', () => {
    const beta = get('/apis', aggregatedContentType('v2beta1'));
    assert.equal(beta.headers['Content-Type'], aggregatedContentType('v2beta1'));
    assert.equal(JSON.parse(beta.body!).apiVersion, 'apidiscovery.k8s.io/v2beta1');
    const preferBeta = `${aggregatedContentType('v2')};q=0.5,${aggregatedContentType('v2beta1')}`;
    assert.equal(get('/apis', preferBeta).headers['Content-Type'], aggregatedContentType('v2beta1'));
    // kubectl's first choice (client-go AcceptV2NoPeer): we have no peers, so it is v2.
    const noPeer = `${aggregatedContentType('v2')};profile=nopeer,${AGGREGATOR_ACCEPT},application/json`;
    assert.equal(get('/apis', noPeer).headers['Content-Type'], aggregatedContentType('v2'));
  });

  it('serves the legacy APIGroupList for plain JSON, wildcards and no Accept at all', () => {
    for (const accept of [
      undefined,
      '',
      'application/json',
      '*/*',
      'application/*',
      'application/json;charset=utf-8',
    ]) {
      const res = get('/apis', accept);
      assert.equal(res.status, 200, String(accept));
      assert.equal(res.headers['Content-Type'], 'application/json');
      assert.deepEqual(JSON.parse(res.body!), apiGroupList(descriptors));
    }
    const fallback = get(
      '/apis',
      `application/vnd.kubernetes.protobuf,${aggregatedContentType('v2')};q=0,application/json`,
    );
    assert.deepEqual(JSON.parse(fallback.body!), apiGroupList(descriptors));
  });

  it('answers 406 (never a plain-JSON 200) to an Accept it cannot honor', () => {
    for (const accept of [
      'application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList',
      'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery',
      'application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList',
      'application/vnd.kubernetes.protobuf',
      'application/json;as=Table;v=v1;g=meta.k8s.io',
    ]) {
      const res = get('/apis', accept);
      assert.equal(res.status, 406, accept);
      assert.equal(res.headers['Content-Type'], 'application/json');
      const status = JSON.parse(res.body!);
      assert.equal(status.kind, 'Status');
      assert.equal(status.reason, 'NotAcceptable');
      assert.equal(status.code, 406);
      assert.match(status.message, /application\/json;g=apidiscovery\.k8s\.io;v=v2;as=APIGroupDiscoveryList/);
    }
  });

  it('serves the group and the group-version (the availability probe sends no Accept)', () => {
    assert.deepEqual(JSON.parse(get(`/apis/${G}`).body!), apiGroup(descriptors, G));
    const probe = get(`/apis/${G}/${V}`);
    assert.equal(probe.status, 200);
    assert.deepEqual(JSON.parse(probe.body!), apiResourceList(descriptors, G, V));
    assert.equal(get(`/apis/${G}/${V}`, 'application/json').status, 200);
    assert.equal(get(`/apis/${G}/${V}`, `${AGGREGATOR_ACCEPT},application/json`).status, 200);
    // Aggregated discovery exists only at /apis.
    assert.equal(get(`/apis/${G}/${V}`, AGGREGATOR_ACCEPT).status, 406);
    const etag = probe.headers.Etag!;
    assert.equal(get(`/apis/${G}/${V}`, undefined, etag).status, 304);
  });

  it('ignores the query and one trailing slash, and leaves every other path to the server', () => {
    assert.equal(get('/apis?timeout=32s', AGGREGATOR_ACCEPT).status, 200);
    assert.equal(get(`/apis/${G}/${V}/`).status, 200);
    for (const url of [`/apis/${G}/${V}/sandboxes`, `/apis/${G}/v1`, '/apis/apps', '/api', '/healthz', '/openapi/v2']) {
      assert.equal(handle({ url }), undefined, url);
    }
  });
});
