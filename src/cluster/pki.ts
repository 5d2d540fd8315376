import { readFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxError } from '../errors.js';
import {
  createCertificateAuthority,
  issueCertificate,
  newKey,
  privateKeyPem,
  publicKeyPem,
  type PemPair,
  type Usage,
} from '../pki/index.js';

/**
 * The local control plane's PKI, made with src/pki: a cluster CA (also signs kubelet serving certs of our
 * virtual nodes), a front-proxy CA + client cert (so an aggregated apiserver can be registered and trust the
 * apiserver's proxied requests), the service-account signing key, and one client cert per component. Every
 * path below is a PEM file in `dir` (keys 0600), because the Kubernetes binaries take files.
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

/** Paths of a certificate and its key. */
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

const DAY_MS = 24 * 3600 * 1000;
const CA_VALIDITY_MS = 3650 * DAY_MS;
const LEAF_VALIDITY_MS = 365 * DAY_MS;
const USAGES: Record<CertRequest['usage'], Usage[]> = {
  server: ['server'],
  client: ['client'],
  both: ['server', 'client'],
};

async function writePair(dir: string, name: string, pem: PemPair): Promise<CertPair> {
  const pair = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  await writeFile(pair.key, pem.keyPem, { mode: 0o600 });
  await writeFile(pair.cert, pem.certPem, { mode: 0o644 });
  return pair;
}

async function readPair(pair: CertPair): Promise<PemPair> {
  try {
    const [certPem, keyPem] = await Promise.all([readFile(pair.cert, 'utf8'), readFile(pair.key, 'utf8')]);
    return { certPem, keyPem };
  } catch (err) {
    throw new SandboxError('cluster.pki', `cannot read the CA ${pair.cert}: ${(err as Error).message}`, {
      cause: err,
      hint: 'the cluster data directory is incomplete; stop the cluster and start it again',
    });
  }
}

async function newCa(dir: string, name: string, commonName: string): Promise<CertPair> {
  return writePair(dir, name, createCertificateAuthority({ commonName }, { validityMs: CA_VALIDITY_MS }));
}

/** Issue a leaf certificate signed by `ca`. Exported so node daemons can get kubelet serving certs. */
export async function issueCert(dir: string, ca: CertPair, req: CertRequest): Promise<CertPair> {
  const pem = issueCertificate(await readPair(ca), {
    subject: { commonName: req.commonName, ...(req.organization ? { organizations: [req.organization] } : {}) },
    usages: USAGES[req.usage],
    subjectAltNames: [...(req.dnsNames ?? []), ...(req.ips ?? [])],
    validityMs: LEAF_VALIDITY_MS,
  });
  return writePair(dir, req.name, pem);
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
  const sa = newKey();
  await writeFile(serviceAccountKey, privateKeyPem(sa.privateKey), { mode: 0o600 });
  await writeFile(serviceAccountPub, publicKeyPem(sa.publicKey), { mode: 0o644 });
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
