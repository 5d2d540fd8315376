import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import { SandboxSpecV1beta1Schema, toOpenApiV3Schema } from '../../src/api/index.js';
import {
  createOpenApiHandler,
  openApiV2Document,
  openApiV3Document,
  openApiV3Url,
} from '../../src/apiserver/openapi.js';
import { toSwaggerSchema, unresolvedRefs, type Json } from '../../src/apiserver/openapi-schema.js';
import type { ResourceDescriptor } from '../../src/apiserver/types.js';
import { ForkRequestSchema, sandboxesDescriptor } from './descriptors.js';

const G = 'agents.x-k8s.io';
const V = 'v1beta1';
const GV = { group: G, version: V };
const descriptors = [sandboxesDescriptor()];
const v3 = openApiV3Document(descriptors, GV);
const v2 = openApiV2Document(descriptors);
const sha512 = (s: string) => createHash('sha512').update(s).digest('hex').toUpperCase();
const META = 'io.k8s.apimachinery.pkg.apis.meta.v1';
const MODEL = 'io.x-k8s.agents.v1beta1';

const P = `/apis/${G}/${V}`;
const PATHS = {
  collection: `${P}/namespaces/{namespace}/sandboxes`,
  item: `${P}/namespaces/{namespace}/sandboxes/{name}`,
  fork: `${P}/namespaces/{namespace}/sandboxes/{name}/fork`,
  pause: `${P}/namespaces/{namespace}/sandboxes/{name}/pause`,
  allNamespaces: `${P}/sandboxes`,
};
const paths = (doc: Json) => doc.paths as Record<string, Record<string, Json>>;
const schemas = (doc: Json) => (doc.components as { schemas: Record<string, Json> }).schemas;
const definitions = (doc: Json) => doc.definitions as Record<string, Json>;
const op = (doc: Json, path: string, method: string) => {
  const o = paths(doc)[path]?.[method];
  assert.ok(o, `${method} ${path}`);
  return o;
};
const paramNames = (o: Json) => ((o.parameters as Json[] | undefined) ?? []).map((p) => p.name);

/** Every value under `key` anywhere in `node`. */
function collect(node: unknown, key: string, out: unknown[] = []): unknown[] {
  if (Array.isArray(node)) node.forEach((n) => collect(n, key, out));
  else if (node !== null && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === key) out.push(v);
      collect(v, key, out);
    }
  }
  return out;
}

describe('OpenAPI documents', () => {
  it('v3 is a valid OpenAPI 3.0 document and every $ref resolves', async () => {
    await SwaggerParser.validate(structuredClone(v3) as never);
    assert.deepEqual(unresolvedRefs(v3), []);
  });

  it('v2 is a valid Swagger 2.0 document (no anyOf/nullable, which would break the cluster-wide protobuf)', async () => {
    await SwaggerParser.validate(structuredClone(v2) as never);
    assert.deepEqual(unresolvedRefs(v2), []);
    assert.deepEqual(collect(v2, 'anyOf'), []);
    assert.deepEqual(collect(v2, 'nullable'), []);
    assert.deepEqual(collect(v2, 'allOf'), []);
  });

  it('has a path per served verb, each operation with its GVK and action', () => {
    const gvk = (kind: string) => ({ group: G, version: V, kind });
    for (const doc of [v3, v2]) {
      assert.deepEqual(Object.keys(paths(doc)).sort(), Object.values(PATHS).sort());
      const methods = (p: string) => Object.keys(paths(doc)[p]!).filter((k) => k !== 'parameters');
      assert.deepEqual(methods(PATHS.collection), ['get', 'post']);
      assert.deepEqual(methods(PATHS.item), ['get', 'delete']);
      assert.deepEqual(methods(PATHS.pause), ['post']);
      assert.deepEqual(methods(PATHS.allNamespaces), ['get']);
      const actions: [string, string, string, string][] = [
        [PATHS.collection, 'get', 'list', 'Sandbox'],
        [PATHS.collection, 'post', 'post', 'Sandbox'],
        [PATHS.item, 'get', 'get', 'Sandbox'],
        [PATHS.item, 'delete', 'delete', 'Sandbox'],
        [PATHS.fork, 'post', 'post', 'SandboxForkRequest'],
        [PATHS.allNamespaces, 'get', 'list', 'Sandbox'],
      ];
      for (const [path, method, action, kind] of actions) {
        const o = op(doc, path, method);
        assert.equal(o['x-kubernetes-action'], action, `${method} ${path}`);
        assert.deepEqual(o['x-kubernetes-group-version-kind'], gvk(kind));
      }
      const ids = collect(paths(doc), 'operationId');
      assert.equal(new Set(ids).size, ids.length, 'operation ids are unique');
      assert.ok(ids.includes('listAgentsXK8sIoV1beta1NamespacedSandbox'));
      assert.ok(ids.includes('createAgentsXK8sIoV1beta1NamespacedSandboxFork'));
    }
  });

  it('offers the standard query parameters of each verb', () => {
    for (const doc of [v3, v2]) {
      const list = paramNames(op(doc, PATHS.collection, 'get'));
      for (const p of [
        'labelSelector',
        'fieldSelector',
        'limit',
        'continue',
        'resourceVersion',
        'watch',
        'timeoutSeconds',
      ])
        assert.ok(list.includes(p), p);
      assert.deepEqual(paramNames(paths(doc)[PATHS.collection]!), ['namespace']);
      assert.ok(paramNames(paths(doc)[PATHS.allNamespaces]!).includes('labelSelector'));
      assert.deepEqual(paramNames(paths(doc)[PATHS.item]!), ['name', 'namespace']);
      for (const o of [op(doc, PATHS.collection, 'post'), op(doc, PATHS.pause, 'post')]) {
        for (const p of ['dryRun', 'fieldManager', 'fieldValidation']) assert.ok(paramNames(o).includes(p), p);
      }
      const del = paramNames(op(doc, PATHS.item, 'delete'));
      for (const p of ['dryRun', 'gracePeriodSeconds', 'propagationPolicy']) assert.ok(del.includes(p), p);
    }
    const del3 = op(v3, PATHS.item, 'delete').requestBody as Json;
    assert.deepEqual(del3, { content: { '*/*': { schema: { $ref: `#/components/schemas/${META}.DeleteOptions` } } } });
    const body2 = (op(v2, PATHS.item, 'delete').parameters as Json[]).find((p) => p.in === 'body');
    assert.deepEqual(body2, {
      in: 'body',
      name: 'body',
      required: false,
      schema: { $ref: `#/definitions/${META}.DeleteOptions` },
    });
  });

  it('leaves out what the descriptor does not serve', () => {
    const readOnly: ResourceDescriptor = { ...sandboxesDescriptor(), verbs: ['get', 'list'], subresources: [] };
    const doc = openApiV3Document([readOnly], GV);
    assert.deepEqual(Object.keys(paths(doc)).sort(), [PATHS.collection, PATHS.item, PATHS.allNamespaces].sort());
    assert.equal(paths(doc)[PATHS.collection]!.post, undefined);
    assert.equal(paths(doc)[PATHS.item]!.delete, undefined);
    const list = paramNames(op(doc, PATHS.collection, 'get'));
    assert.ok(!list.includes('watch') && !list.includes('sendInitialEvents'));
    assert.deepEqual(
      Object.keys(schemas(doc)).filter((k) => k.startsWith(MODEL)),
      [`${MODEL}.Sandbox`, `${MODEL}.SandboxList`],
    );
  });

  it('has what kubectl explain needs: the GVK on the collection operation and a schema carrying it', () => {
    const gvk = op(v3, PATHS.collection, 'get')['x-kubernetes-group-version-kind'];
    const matching = Object.entries(schemas(v3)).filter(([, s]) =>
      (s['x-kubernetes-group-version-kind'] as unknown[] | undefined)?.some(
        (x) => JSON.stringify(x) === JSON.stringify({ group: G, kind: 'Sandbox', version: V }),
      ),
    );
    assert.deepEqual(gvk, { group: G, version: V, kind: 'Sandbox' });
    assert.deepEqual(
      matching.map(([name]) => name),
      [`${MODEL}.Sandbox`],
    );
  });

  it('derives the kind from the TypeBox schema, with metadata pointing at ObjectMeta', () => {
    const sandbox = schemas(v3)[`${MODEL}.Sandbox`]!;
    const props = sandbox.properties as Record<string, Json>;
    assert.deepEqual(props.spec, toOpenApiV3Schema(SandboxSpecV1beta1Schema, 'spec'));
    assert.deepEqual((props.metadata!.allOf as Json[])[0], { $ref: `#/components/schemas/${META}.ObjectMeta` });
    assert.deepEqual(sandbox.required, ['spec']);
    assert.equal(props.apiVersion!.type, 'string');
    const list = schemas(v3)[`${MODEL}.SandboxList`]!;
    assert.deepEqual(list['x-kubernetes-group-version-kind'], [{ group: G, kind: 'SandboxList', version: V }]);
    assert.deepEqual((list.properties as Record<string, Json>).items!.items, {
      $ref: `#/components/schemas/${MODEL}.Sandbox`,
    });
    assert.deepEqual(list.required, ['items']);
    const fork = schemas(v3)[`${MODEL}.SandboxForkRequest`]!;
    assert.deepEqual(
      (fork.properties as Record<string, Json>).count,
      toOpenApiV3Schema(ForkRequestSchema.properties.count),
    );
    for (const name of ['ObjectMeta', 'ListMeta', 'Status', 'DeleteOptions', 'WatchEvent']) {
      assert.ok(schemas(v3)[`${META}.${name}`], name);
      assert.ok(definitions(v2)[`${META}.${name}`], name);
    }
    assert.deepEqual(schemas(v3)[`${META}.DeleteOptions`]!['x-kubernetes-group-version-kind'], [
      { group: '', kind: 'DeleteOptions', version: 'v1' },
      { group: G, kind: 'DeleteOptions', version: V },
    ]);
  });

  it('adds no field a schema does not declare, and requires metadata of a served kind', () => {
    const pause = schemas(v3)[`${MODEL}.SandboxPauseRequest`]!;
    assert.deepEqual(Object.keys(pause.properties as Json), ['apiVersion', 'kind', 'reason']);
    const { metadata: _m, ...noMetadata } = (sandboxesDescriptor().schema as unknown as { properties: Json })
      .properties;
    const bare = {
      ...sandboxesDescriptor(),
      subresources: [],
      schema: { type: 'object', properties: noMetadata } as never,
    };
    assert.throws(() => openApiV3Document([bare], GV), /served resource's schema needs metadata/);
  });

  it('rejects two different schemas for one kind', () => {
    const d = sandboxesDescriptor();
    d.subresources[0]!.responseSchema = ForkRequestSchema; // "Sandbox" again, but not the Sandbox schema
    assert.throws(() => openApiV3Document([d], GV), /Sandbox is given two different schemas/);
  });

  it('v2 schemas are ones kubectl can validate valid Sandboxes against', () => {
    const sandbox = definitions(v2)[`${MODEL}.Sandbox`]!;
    const props = sandbox.properties as Record<string, Json>;
    assert.deepEqual(props.metadata, {
      $ref: `#/definitions/${META}.ObjectMeta`,
      description: (schemas(v3)[`${MODEL}.Sandbox`]!.properties as Record<string, Json>).metadata!.description,
    });
    // int-or-string (e.g. a probe's port): no type left, so both forms pass.
    const spec = JSON.stringify(props.spec);
    assert.ok(spec.includes('"x-kubernetes-int-or-string":true'));
    for (const s of collect(sandbox, 'properties').flatMap((p) => Object.values(p as Record<string, Json>))) {
      if (s['x-kubernetes-int-or-string'] === true) assert.equal(s.type, undefined);
      if (s.type === 'array') assert.ok(s.items, 'arrays have items');
    }
    assert.equal(collect(sandbox, 'additionalProperties').filter((a) => a === false).length, 0);
  });
});

describe('toSwaggerSchema', () => {
  it('rewrites what Swagger 2.0 and kubectl cannot take, as ToStructuralOpenAPIV2 does', () => {
    assert.deepEqual(
      toSwaggerSchema({
        type: 'object',
        required: ['a', 'n'],
        properties: {
          a: { anyOf: [{ type: 'integer' }, { type: 'string' }], 'x-kubernetes-int-or-string': true },
          n: { type: 'object', nullable: true, properties: { x: { type: 'string' } } },
          free: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true, properties: { x: { type: 'string' } } },
          open: { type: 'object', properties: { x: { type: 'string' } }, additionalProperties: true },
          list: { type: 'array', 'x-kubernetes-preserve-unknown-fields': true, items: { type: 'string' } },
          ref: { allOf: [{ $ref: '#/components/schemas/X' }], default: {}, description: 'd' },
        },
      }),
      {
        type: 'object',
        required: ['a'],
        properties: {
          a: { 'x-kubernetes-int-or-string': true },
          n: {},
          free: { 'x-kubernetes-preserve-unknown-fields': true },
          open: { type: 'object', additionalProperties: true },
          list: { 'x-kubernetes-preserve-unknown-fields': true },
          ref: { $ref: '#/definitions/X', description: 'd' },
        },
      },
    );
  });
});

describe('OpenAPI handler', () => {
  const now = Date.UTC(2026, 11, 1, 10, 0, 0);
  const handle = createOpenApiHandler(descriptors, { now: () => now });
  const get = (url: string, accept?: string, ifNoneMatch?: string) => {
    const res = handle({ url, accept, ifNoneMatch });
    assert.ok(res, url);
    return res;
  };
  const v3Body = JSON.stringify(v3);
  const hash = sha512(v3Body);
  const docUrl = `/openapi/v3/apis/${G}/${V}`;

  it('lists only our group-version in the v3 root, with the SHA-512 of the document served', () => {
    const root = get('/openapi/v3');
    assert.equal(root.status, 200);
    assert.deepEqual(JSON.parse(root.body!), {
      paths: { [`apis/${G}/${V}`]: { serverRelativeURL: `${docUrl}?hash=${hash}` } },
    });
    assert.equal(openApiV3Url(GV, hash), `${docUrl}?hash=${hash}`);
    assert.equal(root.headers.Etag, `"${sha512(root.body!)}"`);
    assert.equal(get('/openapi/v3', undefined, root.headers.Etag).status, 304);
  });

  it('serves the document at its hash as immutable for a year', () => {
    const res = get(`${docUrl}?hash=${hash}`, 'application/json');
    assert.equal(res.status, 200);
    assert.equal(res.body, v3Body);
    assert.equal(res.headers.Etag, `"${hash}"`);
    assert.equal(res.headers.Vary, 'Accept');
    assert.equal(res.headers['Cache-Control'], 'public, immutable');
    assert.equal(res.headers.Expires, 'Wed, 01 Dec 2027 10:00:00 GMT');
  });

  it('answers a stale hash with the current document, not a redirect and not cacheable forever', () => {
    const res = get(`${docUrl}?hash=${'0'.repeat(128)}`);
    assert.equal(res.status, 200);
    assert.equal(res.body, v3Body);
    assert.equal(res.headers.Location, undefined);
    assert.equal(res.headers['Cache-Control'], undefined);
    assert.equal(res.headers.Etag, `"${hash}"`);
    assert.equal(get(docUrl).headers['Cache-Control'], undefined);
  });

  it('revalidates with If-None-Match, negotiates JSON only and knows only our group-versions', () => {
    const notModified = get(`${docUrl}?hash=${hash}`, undefined, `"${hash}"`);
    assert.equal(notModified.status, 304);
    assert.equal(notModified.headers.Vary, 'Accept');
    const protobuf = 'application/com.github.proto-openapi.spec.v3@v1.0+protobuf';
    assert.equal(get(docUrl, protobuf).status, 406);
    assert.equal(get(docUrl, `${protobuf}, application/json`).status, 200);
    assert.equal(get('/openapi/v3/apis/apps/v1').status, 404);
  });

  it('serves v2 as JSON with an ETag, 304 on revalidation, 406 for protobuf only', () => {
    const res = get('/openapi/v2', 'application/json');
    assert.equal(res.status, 200);
    assert.deepEqual(JSON.parse(res.body!), v2);
    assert.equal(res.headers.Etag, `"${sha512(res.body!)}"`);
    assert.equal(get('/openapi/v2', 'application/json', res.headers.Etag).status, 304);
    assert.equal(get('/openapi/v2').status, 200);
    assert.equal(get('/openapi/v2', 'application/com.github.proto-openapi.spec.v2@v1.0+protobuf').status, 406);
    for (const path of Object.keys(paths(JSON.parse(res.body!)))) assert.ok(path.startsWith(`/apis/${G}/${V}/`), path);
  });

  it('leaves other paths to the server', () => {
    for (const url of ['/openapi', '/openapi/v2x', '/apis', '/healthz']) assert.equal(handle({ url }), undefined, url);
  });
});
