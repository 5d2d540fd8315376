import assert from 'node:assert/strict';
import { createHash, randomBytes, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import {
  AuthenticationConfigSource,
  AuthenticatorChain,
  delegatedAuthenticator,
  HEALTH_PATHS,
  SubjectAccessReviewAuthorizer,
  TokenReviewAuthenticator,
} from '../../src/apiserver/auth/index.js';
import { parseRequestInfo, requestUrl } from '../../src/apiserver/request-info.js';
import type { Authorizer, UserInfo } from '../../src/apiserver/types.js';
import { issueCert, type CertPair } from '../../src/cluster/index.js';
import { KubeClient } from '../../src/kube/client.js';
import { ConfigMaps, type KubeObject } from '../../src/kube/resource.js';
import { createTestNamespace, getTestCluster, type TestCluster } from '../support/cluster.js';
import { eventually } from '../support/eventually.js';
import {
  call,
  clientCert,
  createCalls,
  keepAliveAgent,
  rogueCa,
  startTestServer,
  type TestServer,
} from './auth-support.js';

const G = '/apis/agents.x-k8s.io/v1beta1';
const allowAll: Authorizer = { authorize: () => ({ allowed: true, reason: 'test: allow all' }) };
const pem = (path: string) => readFileSync(path, 'utf8');
const fingerprint = (path: string) => new X509Certificate(readFileSync(path)).fingerprint256;
const remoteHeaders = (headers: Record<string, unknown> | undefined) =>
  Object.keys(headers ?? {}).filter((h) => h.startsWith('x-remote-'));

describe('delegated authentication and authorization against the real control plane', () => {
  let cluster: TestCluster;
  let ns: Awaited<ReturnType<typeof createTestNamespace>>;
  let dir: string;
  let client: KubeClient;
  let source: AuthenticationConfigSource;
  let server: TestServer;
  let ca: string;
  let frontProxy: CertPair;
  const stop = new AbortController();
  const cleanups: Array<() => Promise<unknown>> = [];

  const asUser = (name: string, extra: Record<string, string | string[]> = {}) => ({
    cert: frontProxy,
    headers: { 'X-Remote-User': name, ...extra },
  });

  before(async () => {
    cluster = await getTestCluster();
    ns = await createTestNamespace('auth');
    dir = await mkdtemp(join(tmpdir(), 'sbx-auth-'));
    ca = pem(cluster.pki.ca.cert);
    frontProxy = cluster.pki.frontProxyClient;
    client = await KubeClient.fromKubeconfig(cluster.kubeconfigPath);
    source = new AuthenticationConfigSource(client);
    await source.start(stop.signal);
    const authn = delegatedAuthenticator(client, source, { anonymous: { paths: HEALTH_PATHS } });
    const authz = new SubjectAccessReviewAuthorizer(client);
    server = await startTestServer({
      serving: cluster.pki.apiserver,
      ca: source.caBundle(),
      authn: () => authn,
      authz: () => authz,
    });
  });

  after(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    stop.abort();
    await server?.close();
    client?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    await ns?.cleanup();
  });

  it('reads both CAs and the header names from kube-system/extension-apiserver-authentication', () => {
    const { requestHeader, clientCa } = source.current;
    assert.ok(requestHeader && clientCa, 'the ConfigMap names a requestheader CA and a client CA');
    assert.deepEqual(
      requestHeader.roots.map((c) => c.fingerprint256),
      [fingerprint(cluster.pki.frontProxyCa.cert)],
    );
    assert.deepEqual(requestHeader.allowedNames, ['front-proxy-client']);
    assert.deepEqual(requestHeader.usernameHeaders, ['x-remote-user']);
    assert.deepEqual(requestHeader.groupHeaders, ['x-remote-group']);
    assert.deepEqual(requestHeader.extraHeaderPrefixes, ['x-remote-extra-']);
    assert.ok(clientCa.roots.some((c) => c.fingerprint256 === fingerprint(cluster.pki.ca.cert)));
    const bundle = source.caBundle();
    for (const cert of [cluster.pki.frontProxyCa.cert, cluster.pki.ca.cert])
      assert.ok(bundle.includes(pem(cert).trim()), `the TLS CA bundle holds ${cert}`);
  });

  it('the front-proxy certificate with identity headers is that user, with groups, extra and system:authenticated', async () => {
    const r = await call(server.port, ca, `${G}/namespaces/${ns.name}/sandboxes`, {
      cert: frontProxy,
      headers: {
        'X-Remote-User': 'alice',
        'X-Remote-Uid': 'uid-1',
        'X-Remote-Group': ['devs', 'ops, oncall'],
        'X-Remote-Extra-Scopes': ['read', 'write'],
        'X-Remote-Extra-Acme.io%2FTeam': 'blue',
      },
    });
    assert.equal(r.status, 403, 'alice has no RBAC: authenticated, then denied');
    const uidRead = source.current.requestHeader!.uidHeaders.includes('x-remote-uid');
    assert.deepEqual(r.body.user, {
      name: 'alice',
      ...(uidRead ? { uid: 'uid-1' } : {}),
      groups: ['devs', 'ops, oncall', 'system:authenticated'],
      extra: { scopes: ['read', 'write'], 'acme.io/team': ['blue'] },
    });
    // the identity headers the ConfigMap names are stripped after use; X-Remote-Uid is one only when it is listed
    assert.deepEqual(
      remoteHeaders(r.body.headers),
      uidRead ? [] : ['x-remote-uid'],
      'identity headers are stripped after use',
    );
  });

  it('verifies the front-proxy certificate once per connection; each request still names its own user', async () => {
    const agent = keepAliveAgent(ca, frontProxy);
    try {
      const before = server.peerCertificateReads();
      for (const name of ['u1', 'u2', 'u3']) {
        const r = await call(server.port, ca, '/apis', { agent, headers: { 'X-Remote-User': name } });
        assert.equal(r.body.user?.name, name);
      }
      assert.equal(server.peerCertificateReads() - before, 1, 'one certificate check for three requests');
    } finally {
      agent.destroy();
    }
  });

  it('never trusts identity headers without the verified front-proxy certificate', async () => {
    const masters = { 'X-Remote-User': 'mallory', 'X-Remote-Group': 'system:masters' };
    const noCert = await call(server.port, ca, `${G}/sandboxes`, { headers: masters });
    assert.equal(noCert.status, 401, JSON.stringify(noCert.body));

    const admin = await call(server.port, ca, `${G}/sandboxes`, { cert: cluster.pki.admin, headers: masters });
    assert.equal(
      admin.body.user?.name,
      'sbx-admin',
      'a client-CA certificate is its own user; the headers are ignored',
    );
    assert.deepEqual(remoteHeaders(admin.body.headers), [], 'and removed');

    const intruder = await clientCert(dir, cluster.pki.frontProxyCa, 'intruder', 'intruder');
    const wrongName = await call(server.port, ca, `${G}/sandboxes`, { cert: intruder, headers: masters });
    assert.equal(wrongName.status, 401, 'front-proxy CA, but a common name not in requestheader-allowed-names');

    const serverOnly = await issueCert(dir, cluster.pki.frontProxyCa, {
      name: 'fp-server-only',
      commonName: 'front-proxy-client',
      usage: 'server',
    });
    const noClientAuth = await call(server.port, ca, `${G}/sandboxes`, { cert: serverOnly, headers: masters });
    assert.equal(noClientAuth.status, 401, 'front-proxy CA and name, but not for client authentication');

    const rogue = await rogueCa(dir, 'rogue-fp-ca');
    const lookalike = await clientCert(dir, rogue, 'lookalike', 'front-proxy-client');
    const forged = await call(server.port, ca, `${G}/sandboxes`, { cert: lookalike, headers: masters });
    assert.equal(forged.status, 401, 'the right name from the wrong CA');
  });

  it('refuses a client certificate signed by another CA, even one claiming sbx-admin in system:masters', async () => {
    const rogue = await rogueCa(dir, 'rogue-client-ca');
    const fake = await clientCert(dir, rogue, 'fake-admin', 'sbx-admin', 'system:masters');
    const r = await call(server.port, ca, `${G}/sandboxes`, { cert: fake });
    assert.equal(r.status, 401);
    assert.match(r.body.failure ?? '', /not signed by a trusted CA/);
  });

  it('an admin client certificate is sbx-admin in system:masters, allowed without a review', async () => {
    const r = await call(server.port, ca, `${G}/namespaces/${ns.name}/sandboxes`, {
      method: 'POST',
      cert: cluster.pki.admin,
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const der = new X509Certificate(readFileSync(cluster.pki.admin.cert)).raw;
    assert.deepEqual(r.body.user, {
      name: 'sbx-admin',
      groups: ['system:masters', 'system:authenticated'],
      extra: {
        'authentication.kubernetes.io/credential-id': [`X509SHA256=${createHash('sha256').update(der).digest('hex')}`],
      },
    });
    assert.deepEqual(r.body.decision, { allowed: true, reason: 'member of system:masters' });
  });

  it('a ServiceAccount token is that ServiceAccount (TokenReview); a garbage token is refused', async () => {
    await cluster.kubectl(['-n', ns.name, 'create', 'serviceaccount', 'robot']);
    const uid = await cluster.kubectl([
      '-n',
      ns.name,
      'get',
      'serviceaccount',
      'robot',
      '-o',
      'jsonpath={.metadata.uid}',
    ]);
    const token = (await cluster.kubectl(['-n', ns.name, 'create', 'token', 'robot'])).trim();
    const r = await call(server.port, ca, `${G}/namespaces/${ns.name}/sandboxes`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    assert.equal(r.status, 403, 'authenticated; the ServiceAccount has no RBAC for sandboxes');
    assert.equal(r.body.user?.name, `system:serviceaccount:${ns.name}:robot`);
    assert.equal(r.body.user?.uid, uid.trim());
    for (const g of ['system:serviceaccounts', `system:serviceaccounts:${ns.name}`, 'system:authenticated'])
      assert.ok(r.body.user?.groups.includes(g), `groups include ${g}`);
    assert.equal(r.body.headers?.['authorization'], undefined, 'the consumed token is removed from the request');

    const garbage = await call(server.port, ca, `${G}/sandboxes`, { headers: { Authorization: 'Bearer not-a-token' } });
    assert.equal(garbage.status, 401);
    assert.match(garbage.body.failure ?? '', /invalid bearer token/);
  });

  it('lets anonymous requests reach only the health paths', async () => {
    for (const path of ['/healthz', '/readyz/etcd', '/livez']) {
      const r = await call(server.port, ca, path);
      assert.equal(r.status, 200, path);
      assert.deepEqual(r.body.user, { name: 'system:anonymous', groups: ['system:unauthenticated'], extra: {} });
      assert.deepEqual(r.body.decision, { allowed: true, reason: `${path} is always allowed` });
    }
    for (const path of ['/apis', '/healthzx', '/healthz/../apis', `${G}/sandboxes`])
      assert.equal((await call(server.port, ca, path)).status, 401, path);
  });

  it('authorizes by SubjectAccessReview: no RBAC is denied, a Role is exactly what it allows, subresources apart', async () => {
    const suffix = randomBytes(3).toString('hex');
    const reader = `reader-${suffix}`;
    const pauser = `pauser-${suffix}`;
    const role = (name: string, rules: unknown[], user: string) =>
      cluster.kubectl(
        ['apply', '-f', '-'],
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'List',
          items: [
            { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name, namespace: ns.name }, rules },
            {
              apiVersion: 'rbac.authorization.k8s.io/v1',
              kind: 'RoleBinding',
              metadata: { name, namespace: ns.name },
              roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
              subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
            },
          ],
        }),
      );
    await role('sbx-reader', [{ apiGroups: ['agents.x-k8s.io'], resources: ['sandboxes'], verbs: ['get'] }], reader);
    await role(
      'sbx-pauser',
      [{ apiGroups: ['agents.x-k8s.io'], resources: ['sandboxes/pause'], verbs: ['create'] }],
      pauser,
    );
    // wait for kube-apiserver's RBAC to see both bindings, asking without a cache
    const uncached = new SubjectAccessReviewAuthorizer(client, { allowCacheTtlMs: 0, denyCacheTtlMs: 0 });
    const user = (name: string): UserInfo => ({ name, groups: ['system:authenticated'], extra: {} });
    const info = (method: string, path: string) => parseRequestInfo(method, requestUrl({ url: path }));
    const obj = `${G}/namespaces/${ns.name}/sandboxes/sb1`;
    await eventually(() => uncached.authorize(user(reader), info('GET', obj)), { until: (d) => d.allowed });
    await eventually(() => uncached.authorize(user(pauser), info('POST', `${obj}/pause`)), { until: (d) => d.allowed });

    const expect = async (name: string, method: string, path: string, status: number) => {
      const r = await call(server.port, ca, path, { ...asUser(name), method });
      assert.equal(r.status, status, `${name} ${method} ${path}: ${JSON.stringify(r.body.decision)}`);
      assert.ok(r.body.decision?.reason, 'every decision says why');
      return r.body.decision!;
    };
    const denied = await expect(`nobody-${suffix}`, 'GET', obj, 403);
    assert.equal(denied.allowed, false);
    assert.match((await expect(reader, 'GET', obj, 200)).reason, /RBAC: allowed by RoleBinding "sbx-reader/);
    await expect(reader, 'POST', `${G}/namespaces/${ns.name}/sandboxes`, 403);
    await expect(reader, 'POST', `${obj}/pause`, 403);
    await expect(reader, 'GET', `${G}/namespaces/${ns.name}/sandboxes`, 403); // list is not get
    await expect(pauser, 'POST', `${obj}/pause`, 200);
    await expect(pauser, 'POST', `${obj}/resume`, 403);
    await expect(pauser, 'POST', `${G}/namespaces/${ns.name}/sandboxes`, 403);
    await expect(pauser, 'GET', obj, 403);
    await expect(reader, 'GET', `${G}/namespaces/other-${suffix}/sandboxes/sb1`, 403); // a Role is one namespace
  });

  it('caches reviews (allow, deny, valid and invalid tokens), shares concurrent ones, bounds and expires them', async () => {
    const registry = new Registry();
    const counted = await KubeClient.fromKubeconfig(cluster.kubeconfigPath, { registry });
    const tokens = new TokenReviewAuthenticator(counted, { cacheTtlMs: 1500 });
    const chain = new AuthenticatorChain([tokens]);
    const tokenServer = await startTestServer({
      serving: cluster.pki.apiserver,
      ca: '',
      authn: () => chain,
      authz: () => allowAll,
    });
    const authz = new SubjectAccessReviewAuthorizer(counted, {
      allowCacheTtlMs: 1500,
      denyCacheTtlMs: 1500,
      maxCacheEntries: 2,
    });
    try {
      await cluster.kubectl(['-n', ns.name, 'create', 'serviceaccount', 'cached']);
      const token = (await cluster.kubectl(['-n', ns.name, 'create', 'token', 'cached'])).trim();
      const bearer = (t: string) => ({ headers: { Authorization: `Bearer ${t}` } });
      const reviews = () => createCalls(registry, 'tokenreviews');
      const sars = () => createCalls(registry, 'subjectaccessreviews');

      const t0 = await reviews();
      for (let i = 0; i < 3; i++) assert.equal((await call(tokenServer.port, ca, '/x', bearer(token))).status, 200);
      assert.equal((await reviews()) - t0, 1, 'a valid token: one review for three requests');
      for (let i = 0; i < 3; i++) assert.equal((await call(tokenServer.port, ca, '/x', bearer('garbage'))).status, 401);
      assert.equal((await reviews()) - t0, 2, 'an invalid token: one review for three requests');
      const burst = await Promise.all(
        Array.from({ length: 5 }, () => call(tokenServer.port, ca, '/x', bearer('other-garbage'))),
      );
      assert.deepEqual(
        burst.map((r) => r.status),
        [401, 401, 401, 401, 401],
      );
      assert.equal((await reviews()) - t0, 3, 'five concurrent requests with a new token share one review');
      await sleep(1600);
      assert.equal((await call(tokenServer.port, ca, '/x', bearer(token))).status, 200);
      assert.equal((await reviews()) - t0, 4, 'an expired answer is asked again');

      const user = (name: string, groups: string[] = []): UserInfo => ({ name, groups, extra: {} });
      const get = parseRequestInfo('GET', requestUrl({ url: `${G}/namespaces/${ns.name}/sandboxes/sb1` }));
      const s0 = await sars();
      assert.equal((await authz.authorize(user('root', ['system:masters']), get)).allowed, true);
      assert.equal(
        (await authz.authorize(user('anyone'), parseRequestInfo('GET', requestUrl({ url: '/livez/ping' })))).allowed,
        true,
      );
      assert.equal((await sars()) - s0, 0, 'system:masters and the health paths ask nobody');
      for (let i = 0; i < 3; i++) assert.equal((await authz.authorize(user('denied-a'), get)).allowed, false);
      assert.equal((await sars()) - s0, 1, 'a deny: one review for three requests');
      await Promise.all(Array.from({ length: 5 }, () => authz.authorize(user('denied-b'), get)));
      assert.equal((await sars()) - s0, 2, 'five concurrent requests share one review');
      await authz.authorize(user('denied-c'), get); // a third key: the least recently used (denied-a) goes
      await authz.authorize(user('denied-a'), get);
      assert.equal((await sars()) - s0, 4, 'the cache holds at most maxCacheEntries decisions');
      await authz.authorize(user('denied-a'), get);
      assert.equal((await sars()) - s0, 4);
      await sleep(1600);
      await authz.authorize(user('denied-a'), get);
      assert.equal((await sars()) - s0, 5, 'an expired decision is asked again');
    } finally {
      await tokenServer.close();
      counted.close();
    }
  });

  it('reloads the settings when the ConfigMap changes, keeps them through a bad edit, and tells the server', async () => {
    type ConfigMap = KubeObject & { data?: Record<string, string> };
    const real = await client.get<ConfigMap>(ConfigMaps, 'kube-system', 'extension-apiserver-authentication');
    await client.create<ConfigMap>(ConfigMaps, { metadata: { name: 'authn', namespace: ns.name }, data: real.data });
    const edit = (data: Record<string, string | null>) => client.patch(ConfigMaps, ns.name, 'authn', { data }, 'merge');
    const local = new AuthenticationConfigSource(client, { namespace: ns.name, name: 'authn' });
    const ctrl = new AbortController();
    await local.start(ctrl.signal);
    const bundles: string[] = [];
    const authn = delegatedAuthenticator(client, local);
    const reloading = await startTestServer({
      serving: cluster.pki.apiserver,
      ca: local.caBundle(),
      authn: () => authn,
      authz: () => allowAll,
    });
    local.onChange((_config, bundle) => {
      bundles.push(bundle);
      const serving = cluster.pki.apiserver;
      reloading.server.setSecureContext({
        cert: pem(serving.cert),
        key: pem(serving.key),
        ...(bundle ? { ca: bundle } : {}),
      });
    });
    const generation = (g: number) =>
      eventually(() => local.current, { until: (c) => c.generation === g, what: `generation ${g}` });
    const alice = () => call(reloading.port, ca, '/apis', asUser('alice', { 'X-Remote-Uid': 'uid-7' }));
    try {
      assert.equal(local.current.generation, 1);
      assert.equal((await alice()).body.user?.name, 'alice');

      await edit({ 'requestheader-allowed-names': '["someone-else"]' });
      await generation(2);
      assert.equal((await alice()).status, 401, 'front-proxy-client is no longer an allowed name');

      await edit({ 'requestheader-allowed-names': 'front-proxy-client' }); // not a JSON array
      await edit({
        'requestheader-allowed-names': '["front-proxy-client"]',
        'requestheader-uid-headers': '["X-Remote-Uid"]',
      });
      await generation(3); // the bad edit, seen in between, changed nothing
      assert.deepEqual(local.current.requestHeader?.allowedNames, ['front-proxy-client']);
      assert.deepEqual((await alice()).body.user, {
        name: 'alice',
        uid: 'uid-7',
        groups: ['system:authenticated'],
        extra: {},
      });

      await edit({ 'requestheader-client-ca-file': null });
      await generation(4);
      assert.equal(local.current.requestHeader, undefined);
      assert.equal(local.caBundle(), pem(cluster.pki.ca.cert).trim() + '\n', 'only the client CA is left to ask for');
      assert.equal((await alice()).status, 401, 'no requestheader CA: no identity headers are trusted');

      await client.delete(ConfigMaps, ns.name, 'authn');
      await generation(5);
      assert.equal(local.current.clientCa, undefined);
      assert.equal(local.caBundle(), '');
      assert.equal(bundles.length, 4, 'one notification per effective change');
    } finally {
      ctrl.abort();
      await reloading.close();
    }
  });

  it('through the real aggregator: kube-apiserver presents the front-proxy certificate and its caller in headers', async () => {
    const group = `authtest-${randomBytes(3).toString('hex')}.sbx.test`;
    const svc = 'auth-test';
    const serving = await issueCert(dir, cluster.pki.ca, {
      name: 'aggregated-serving',
      commonName: `${svc}.${ns.name}.svc`,
      dnsNames: [`${svc}.${ns.name}.svc`],
      ips: [cluster.hostAddress],
      usage: 'server',
    });
    const authn = delegatedAuthenticator(client, source);
    const authz = new SubjectAccessReviewAuthorizer(client);
    const aggregated = await startTestServer({
      serving,
      ca: source.caBundle(),
      host: cluster.hostAddress,
      authn: () => authn,
      authz: () => authz,
    });
    cleanups.push(() => aggregated.close());
    const apiService = `v1.${group}`;
    await cluster.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: [
          {
            apiVersion: 'v1',
            kind: 'Service',
            metadata: { name: svc, namespace: ns.name },
            spec: { ports: [{ name: 'https', port: 443, targetPort: aggregated.port }] },
          },
          {
            apiVersion: 'discovery.k8s.io/v1',
            kind: 'EndpointSlice',
            metadata: { name: `${svc}-1`, namespace: ns.name, labels: { 'kubernetes.io/service-name': svc } },
            addressType: cluster.hostAddress.includes(':') ? 'IPv6' : 'IPv4',
            endpoints: [{ addresses: [cluster.hostAddress], conditions: { ready: true } }],
            ports: [{ name: 'https', port: aggregated.port, protocol: 'TCP' }],
          },
        ],
      }),
    );
    await cluster.kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'apiregistration.k8s.io/v1',
        kind: 'APIService',
        metadata: { name: apiService },
        spec: {
          group,
          version: 'v1',
          service: { namespace: ns.name, name: svc, port: 443 },
          caBundle: Buffer.from(ca).toString('base64'),
          groupPriorityMinimum: 1000,
          versionPriority: 15,
        },
      }),
    );
    // removed before the server closes (cleanups run in reverse), so no other test meets an unavailable APIService
    cleanups.push(() => cluster.kubectl(['delete', 'apiservice', apiService, '--ignore-not-found']));
    // Available means the aggregator's own probe (system:kube-aggregator in system:masters) got through us
    await cluster.kubectl(['wait', '--for=condition=Available', `apiservice/${apiService}`, '--timeout=60s']);

    const admin = JSON.parse(
      await cluster.kubectl(['get', '--raw', `/apis/${group}/v1/namespaces/${ns.name}/widgets/w1`]),
    ) as {
      user: UserInfo;
      headers: Record<string, unknown>;
      decision: { reason: string };
    };
    assert.equal(admin.user.name, 'sbx-admin');
    assert.deepEqual(admin.user.groups, ['system:masters', 'system:authenticated']);
    assert.match(
      admin.user.extra['authentication.kubernetes.io/credential-id']?.[0] ?? '',
      /^X509SHA256=[0-9a-f]{64}$/,
    );
    assert.deepEqual(remoteHeaders(admin.headers), []);
    assert.equal(admin.decision.reason, 'member of system:masters');

    // an impersonated user reaches discovery (system:discovery grants it to system:authenticated) as itself
    const alice = JSON.parse(
      await cluster.kubectl(['get', '--raw', `/apis/${group}/v1`, '--as=alice', '--as-group=devs']),
    ) as { user: UserInfo; decision: { reason: string } };
    assert.equal(alice.user.name, 'alice');
    assert.deepEqual(alice.user.groups, ['devs', 'system:authenticated']);
    assert.match(alice.decision.reason, /RBAC: allowed by ClusterRoleBinding "system:discovery"/);
  });
});
