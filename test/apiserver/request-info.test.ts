import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isWatch, parseFieldSelector, parseRequestInfo, requestUrl } from '../../src/apiserver/request-info.js';
import type { RequestInfo } from '../../src/apiserver/types.js';

const G = '/apis/agents.x-k8s.io/v1beta1';

function parse(method: string, target: string): RequestInfo {
  return parseRequestInfo(method, requestUrl({ url: target }));
}

/** A resource request's expected fields; the rest default to the sandboxes resource in agents.x-k8s.io/v1beta1. */
function res(fields: Partial<RequestInfo> & { path: string; verb: string }): RequestInfo {
  return {
    isResourceRequest: true,
    apiGroup: 'agents.x-k8s.io',
    apiVersion: 'v1beta1',
    namespace: '',
    resource: 'sandboxes',
    subresource: '',
    name: '',
    ...fields,
  };
}

function nonRes(path: string, verb: string): RequestInfo {
  return {
    isResourceRequest: false,
    path,
    verb,
    apiGroup: '',
    apiVersion: '',
    namespace: '',
    resource: '',
    subresource: '',
    name: '',
  };
}

describe('parseRequestInfo (requestinfo.go for our paths)', () => {
  const NS = `${G}/namespaces/team-a/sandboxes`;
  const cases: Array<[string, string, RequestInfo]> = [
    // collection and object verbs
    ['POST', NS, res({ path: NS, verb: 'create', namespace: 'team-a' })],
    ['GET', NS, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?limit=500`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?watch=true`, res({ path: NS, verb: 'watch', namespace: 'team-a' })],
    ['GET', `${NS}?watch=1`, res({ path: NS, verb: 'watch', namespace: 'team-a' })],
    ['GET', `${NS}?watch=false`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?watch=0`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: 'get', namespace: 'team-a', name: 'sb1' })],
    ['HEAD', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: 'get', namespace: 'team-a', name: 'sb1' })],
    ['PUT', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: 'update', namespace: 'team-a', name: 'sb1' })],
    ['PATCH', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: 'patch', namespace: 'team-a', name: 'sb1' })],
    ['DELETE', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: 'delete', namespace: 'team-a', name: 'sb1' })],
    ['DELETE', NS, res({ path: NS, verb: 'deletecollection', namespace: 'team-a' })],
    ['OPTIONS', `${NS}/sb1`, res({ path: `${NS}/sb1`, verb: '', namespace: 'team-a', name: 'sb1' })],
    // subresources (the POST actions)
    [
      'POST',
      `${NS}/sb1/pause`,
      res({ path: `${NS}/sb1/pause`, verb: 'create', namespace: 'team-a', name: 'sb1', subresource: 'pause' }),
    ],
    [
      'POST',
      `${NS}/sb1/fork`,
      res({ path: `${NS}/sb1/fork`, verb: 'create', namespace: 'team-a', name: 'sb1', subresource: 'fork' }),
    ],
    // a field selector on metadata.name names the object for list and watch
    [
      'GET',
      `${NS}?fieldSelector=metadata.name%3Dsb1`,
      res({ path: NS, verb: 'list', namespace: 'team-a', name: 'sb1' }),
    ],
    [
      'GET',
      `${NS}?watch=1&resourceVersion=0&fieldSelector=metadata.name==sb1`,
      res({ path: NS, verb: 'watch', namespace: 'team-a', name: 'sb1' }),
    ],
    [
      'GET',
      `${NS}?fieldSelector=metadata.namespace%3Dteam-a,metadata.name%3Dsb1`,
      res({ path: NS, verb: 'list', namespace: 'team-a', name: 'sb1' }),
    ],
    // ... but not a negated one, an unparsable one, nor a name that is not a valid path segment
    ['GET', `${NS}?fieldSelector=metadata.name!%3Dsb1`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?fieldSelector=metadata.name`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?fieldSelector=metadata.name%3D..`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    ['GET', `${NS}?fieldSelector=metadata.name%3Da%25b`, res({ path: NS, verb: 'list', namespace: 'team-a' })],
    // a field selector never renames a get, and a delete is never a deletecollection by selector
    [
      'GET',
      `${NS}/sb1?fieldSelector=metadata.name%3Dother`,
      res({ path: `${NS}/sb1`, verb: 'get', namespace: 'team-a', name: 'sb1' }),
    ],
    [
      'DELETE',
      `${NS}?fieldSelector=metadata.name%3Dsb1`,
      res({ path: NS, verb: 'deletecollection', namespace: 'team-a' }),
    ],
    // all namespaces
    ['GET', `${G}/sandboxes`, res({ path: `${G}/sandboxes`, verb: 'list' })],
    ['GET', `${G}/sandboxes?watch=true`, res({ path: `${G}/sandboxes`, verb: 'watch' })],
    // the legacy /watch/ path verb
    [
      'GET',
      `${G}/watch/namespaces/team-a/sandboxes`,
      res({ path: `${G}/watch/namespaces/team-a/sandboxes`, verb: 'watch', namespace: 'team-a' }),
    ],
    // namespaces themselves, as upstream parses them
    [
      'GET',
      `${G}/namespaces/team-a`,
      res({ path: `${G}/namespaces/team-a`, verb: 'get', namespace: 'team-a', resource: 'namespaces', name: 'team-a' }),
    ],
    [
      'PUT',
      `${G}/namespaces/team-a/finalize`,
      res({
        path: `${G}/namespaces/team-a/finalize`,
        verb: 'update',
        namespace: 'team-a',
        resource: 'namespaces',
        name: 'team-a',
        subresource: 'finalize',
      }),
    ],
    // the core group has no group segment
    [
      'GET',
      '/api/v1/namespaces/default/pods/p',
      res({
        path: '/api/v1/namespaces/default/pods/p',
        verb: 'get',
        apiGroup: '',
        apiVersion: 'v1',
        namespace: 'default',
        resource: 'pods',
        name: 'p',
      }),
    ],
    // percent-encoding is decoded before the split, as Go's URL.Path
    ['GET', `${NS}/sb%31`, res({ path: `${NS}/sb1`, verb: 'get', namespace: 'team-a', name: 'sb1' })],
    // dot segments are resolved once, by requestUrl
    [
      'GET',
      `${G}/namespaces/other/sandboxes/x/../../../team-a/sandboxes/sb1`,
      res({ path: `${NS}/sb1`, verb: 'get', namespace: 'team-a', name: 'sb1' }),
    ],
    // discovery, OpenAPI, health: non-resource, the verb is the lowercase method
    ['GET', '/apis', nonRes('/apis', 'get')],
    ['GET', '/apis/agents.x-k8s.io', nonRes('/apis/agents.x-k8s.io', 'get')],
    ['GET', G, nonRes(G, 'get')],
    ['GET', `${G}/`, nonRes(`${G}/`, 'get')],
    ['GET', '/api/v1', nonRes('/api/v1', 'get')],
    ['GET', '/openapi/v2', nonRes('/openapi/v2', 'get')],
    [
      'GET',
      `/openapi/v3/apis/agents.x-k8s.io/v1beta1?hash=ABC`,
      nonRes('/openapi/v3/apis/agents.x-k8s.io/v1beta1', 'get'),
    ],
    ['GET', '/healthz', nonRes('/healthz', 'get')],
    ['HEAD', '/readyz/ping', nonRes('/readyz/ping', 'head')],
    ['POST', '/livez', nonRes('/livez', 'post')],
    ['GET', '/', nonRes('/', 'get')],
    ['GET', '/version', nonRes('/version', 'get')],
  ];
  for (const [method, target, want] of cases)
    it(`${method} ${target}`, () => assert.deepEqual(parse(method, target), want));

  it('a path with an invalid percent-encoding is a bad request', () => {
    assert.throws(() => parse('GET', `${NS}/%zz`), { code: 'apiserver.bad-request' });
  });

  it('a special verb with nothing after it is a bad request', () => {
    assert.throws(() => parse('GET', `${G}/watch`), { code: 'apiserver.bad-request' });
  });
});

describe('requestUrl', () => {
  it('never reads a path as an authority', () => {
    const url = requestUrl({ url: '//evil.example/healthz' });
    assert.notEqual(url.host, 'evil.example');
    assert.equal(url.pathname, '//evil.example/healthz');
    assert.equal(parse('GET', '//evil.example/healthz').path, '//evil.example/healthz');
  });

  it('rejects absolute-form and asterisk request targets', () => {
    assert.throws(() => requestUrl({ url: 'http://other/apis' }), { code: 'apiserver.bad-request' });
    assert.throws(() => requestUrl({ url: '*' }), { code: 'apiserver.bad-request' });
  });
});

describe('isWatch (Convert_Slice_string_To_bool)', () => {
  const cases: Array<[string, boolean]> = [
    ['', false],
    ['watch=true', true],
    ['watch=1', true],
    ['watch=TRUE', true],
    ['watch=', true],
    ['watch=yes', true],
    ['watch=false', false],
    ['watch=False', false],
    ['watch=0', false],
    ['watch=0&watch=1', false],
  ];
  for (const [query, want] of cases) it(`?${query}`, () => assert.equal(isWatch(new URLSearchParams(query)), want));
});

describe('parseFieldSelector (fields.ParseSelector)', () => {
  it('splits on unescaped commas, sorts, and unescapes values', () => {
    assert.deepEqual(parseFieldSelector('status.phase!=Running,metadata.name==a\\,b'), [
      { field: 'metadata.name', op: '==', value: 'a,b' },
      { field: 'status.phase', op: '!=', value: 'Running' },
    ]);
    assert.deepEqual(parseFieldSelector(''), []);
    assert.deepEqual(parseFieldSelector('a=,'), [{ field: 'a', op: '=', value: '' }]);
  });

  it('rejects terms without an operator and bad escapes', () => {
    assert.throws(() => parseFieldSelector('metadata.name'), /cannot understand/);
    assert.throws(() => parseFieldSelector('a=b\\x'), /invalid escape/);
    assert.throws(() => parseFieldSelector('a=b=c'), /unescaped =/);
    assert.throws(() => parseFieldSelector('a=b\\'), /unfinished escape/);
  });
});
