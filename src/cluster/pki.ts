import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SandboxError } from '../errors.js';

const run = promisify(execFile);

/**
 * The local control plane's PKI, made with the system `openssl` (3.x): a cluster CA (also signs kubelet serving
 * certs of our virtual nodes), a front-proxy CA + client cert (so an aggregated apiserver can be registered and
 * trust the apiserver's proxied requests), the service-account signing key, and one client cert per component.
 */
export interface Pki {
  dir: string;
  ca: CertPair;
  frontProxyCa: CertPair;
  frontProxyClient: CertPair;
  apiserver: CertPair;
  apiserverKubeletClient: CertPair;
  admin: CertPair;
  controllerManager: CertPair;
  scheduler: CertPair;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

export interface CertPair {
  cert: string;
  key: string;
}

export interface CertRequest {
  name: string;
  commonName: string;
  organization?: string;
  ips?: string[];
  dnsNames?: string[];
  usage: 'server' | 'client' | 'both';
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run('openssl', args, { timeout: 30_000 });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT')
      throw new SandboxError('cluster.pki', 'openssl not found', { hint: 'install openssl (apt-get install openssl)' });
    throw new SandboxError('cluster.pki', `openssl ${args[0]} failed: ${e.stderr ?? e.message}`, { cause: err });
  }
}

async function newKey(path: string): Promise<void> {
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', path]);
}

async function newCa(dir: string, name: string, commonName: string): Promise<CertPair> {
  const pair = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  await newKey(pair.key);
  await openssl([
    'req',
    '-x509',
    '-new',
    '-key',
    pair.key,
    '-subj',
    `/CN=${commonName}`,
    '-days',
    '3650',
    '-out',
    pair.cert,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
  return pair;
}

/** Issue a leaf certificate signed by `ca`. Exported so node daemons can get kubelet serving certs. */
export async function issueCert(dir: string, ca: CertPair, req: CertRequest): Promise<CertPair> {
  const pair = { cert: join(dir, `${req.name}.crt`), key: join(dir, `${req.name}.key`) };
  await newKey(pair.key);
  const subject = `${req.organization ? `/O=${req.organization}` : ''}/CN=${req.commonName}`;
  const eku = { server: 'serverAuth', client: 'clientAuth', both: 'serverAuth,clientAuth' }[req.usage];
  const sans = [...(req.dnsNames ?? []).map((d) => `DNS:${d}`), ...(req.ips ?? []).map((i) => `IP:${i}`)];
  await openssl([
    'req',
    '-x509',
    '-new',
    '-key',
    pair.key,
    '-subj',
    subject,
    '-days',
    '365',
    '-out',
    pair.cert,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-addext',
    'basicConstraints=critical,CA:FALSE',
    '-addext',
    'keyUsage=critical,digitalSignature,keyEncipherment',
    '-addext',
    `extendedKeyUsage=${eku}`,
    ...(sans.length ? ['-addext', `subjectAltName=${sans.join(',')}`] : []),
  ]);
  return pair;
}

export interface PkiOptions {
  dir: string;
  /** Addresses clients use to reach the apiserver (its serving cert's IP SANs). */
  apiserverIps: string[];
  serviceIp: string;
  clusterDomain: string;
}

export async function createPki(opts: PkiOptions): Promise<Pki> {
  const dir = opts.dir;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const [ca, frontProxyCa] = await Promise.all([
    newCa(dir, 'ca', 'sandbox-operator-local-ca'),
    newCa(dir, 'front-proxy-ca', 'sandbox-operator-front-proxy-ca'),
  ]);
  const svc = [
    'kubernetes',
    'kubernetes.default',
    'kubernetes.default.svc',
    `kubernetes.default.svc.${opts.clusterDomain}`,
    'localhost',
  ];
  const [apiserver, apiserverKubeletClient, admin, controllerManager, scheduler, frontProxyClient] = await Promise.all([
    issueCert(dir, ca, {
      name: 'apiserver',
      commonName: 'kube-apiserver',
      usage: 'server',
      dnsNames: svc,
      ips: [...opts.apiserverIps, opts.serviceIp, '127.0.0.1'],
    }),
    issueCert(dir, ca, {
      name: 'apiserver-kubelet-client',
      commonName: 'kube-apiserver-kubelet-client',
      organization: 'system:masters',
      usage: 'client',
    }),
    issueCert(dir, ca, { name: 'admin', commonName: 'sbx-admin', organization: 'system:masters', usage: 'client' }),
    issueCert(dir, ca, { name: 'controller-manager', commonName: 'system:kube-controller-manager', usage: 'client' }),
    issueCert(dir, ca, { name: 'scheduler', commonName: 'system:kube-scheduler', usage: 'client' }),
    issueCert(dir, frontProxyCa, { name: 'front-proxy-client', commonName: 'front-proxy-client', usage: 'client' }),
  ]);
  const serviceAccountKey = join(dir, 'sa.key');
  const serviceAccountPub = join(dir, 'sa.pub');
  await newKey(serviceAccountKey);
  await openssl(['pkey', '-in', serviceAccountKey, '-pubout', '-out', serviceAccountPub]);
  return {
    dir,
    ca,
    frontProxyCa,
    frontProxyClient,
    apiserver,
    apiserverKubeletClient,
    admin,
    controllerManager,
    scheduler,
    serviceAccountKey,
    serviceAccountPub,
  };
}
