/**
 * The delegated authentication settings kube-apiserver publishes in ConfigMap
 * kube-system/extension-apiserver-authentication (k8s.io/apiserver pkg/server/options/authentication.go and
 * headerrequest/requestheader_controller.go): the front-proxy CA and the header names it fills, and the CA of
 * client certificates. List values are JSON-array strings.
 */
import { X509Certificate } from 'node:crypto';
import { SandboxError } from '../../errors.js';

export const AUTHENTICATION_CONFIGMAP = { namespace: 'kube-system', name: 'extension-apiserver-authentication' };

export interface RequestHeaderConfig {
  /** PEM bundle that signs the front proxy's (the aggregator's) client certificate. */
  caPem: string;
  roots: X509Certificate[];
  /** Common names the front proxy's certificate may carry; empty: any signed by the CA. */
  allowedNames: string[];
  /** Header names, lowercased (node's IncomingMessage keys). */
  usernameHeaders: string[];
  uidHeaders: string[];
  groupHeaders: string[];
  extraHeaderPrefixes: string[];
}

export interface ClientCaConfig {
  caPem: string;
  roots: X509Certificate[];
}

export interface AuthenticationSettings {
  /** Absent when the ConfigMap names no requestheader CA: then no request's identity headers are trusted. */
  requestHeader?: RequestHeaderConfig;
  /** Absent when it names no client CA: then client certificates authenticate nobody. */
  clientCa?: ClientCaConfig;
}

export interface AuthenticationConfig extends AuthenticationSettings {
  /** Bumped on every change, so per-connection certificate verdicts made under an older one are redone. */
  generation: number;
}

/** Where authenticators read the current settings (an AuthenticationConfigSource, or a fixed one). */
export interface AuthenticationConfigProvider {
  readonly current: AuthenticationConfig;
}

const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END \1-----/g;

/** The certificates of a PEM bundle (other block types are skipped, as cert.ParseCertsPEM does). */
export function parseCertificateBundle(pem: string, what: string): X509Certificate[] {
  const certs: X509Certificate[] = [];
  for (const m of pem.matchAll(PEM_BLOCK)) {
    if (m[1] !== 'CERTIFICATE') continue;
    try {
      certs.push(new X509Certificate(m[0]));
    } catch (err) {
      throw new SandboxError('apiserver.auth-config', `${what}: certificate ${certs.length + 1} does not parse`, {
        cause: err,
        hint: `fix the PEM in ${what}`,
      });
    }
  }
  if (certs.length === 0)
    throw new SandboxError('apiserver.auth-config', `${what} holds no PEM certificate`, {
      hint: `${what} must be a PEM bundle of CA certificates`,
    });
  return certs;
}

function stringList(data: Record<string, string>, key: string): string[] {
  const raw = data[key];
  if (raw === undefined || raw.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new SandboxError('apiserver.auth-config', `${key} is not JSON: ${raw.slice(0, 100)}`, {
      cause: err,
      hint: `${key} must be a JSON array of strings, e.g. ["X-Remote-User"]`,
    });
  }
  if (!Array.isArray(parsed) || !parsed.every((v): v is string => typeof v === 'string'))
    throw new SandboxError('apiserver.auth-config', `${key} is not a JSON array of strings: ${raw.slice(0, 100)}`, {
      hint: `${key} must be a JSON array of strings, e.g. ["X-Remote-User"]`,
    });
  return parsed;
}

const headerNames = (data: Record<string, string>, key: string) =>
  stringList(data, key)
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h !== '');

/**
 * The settings in the ConfigMap's data. Throws a SandboxError naming the key at fault, so a caller can keep the
 * settings it had instead of trusting a half-read one.
 */
export function parseAuthenticationConfigMap(data: Record<string, string> | undefined): AuthenticationSettings {
  const d = data ?? {};
  const out: AuthenticationSettings = {};
  const rhPem = d['requestheader-client-ca-file'];
  if (rhPem?.trim()) {
    out.requestHeader = {
      caPem: rhPem,
      roots: parseCertificateBundle(rhPem, 'requestheader-client-ca-file'),
      allowedNames: stringList(d, 'requestheader-allowed-names'),
      usernameHeaders: headerNames(d, 'requestheader-username-headers'),
      uidHeaders: headerNames(d, 'requestheader-uid-headers'),
      groupHeaders: headerNames(d, 'requestheader-group-headers'),
      extraHeaderPrefixes: headerNames(d, 'requestheader-extra-headers-prefix'),
    };
  }
  const clientPem = d['client-ca-file'];
  if (clientPem?.trim())
    out.clientCa = { caPem: clientPem, roots: parseCertificateBundle(clientPem, 'client-ca-file') };
  return out;
}

/**
 * The CAs a TLS server should list in its CertificateRequest (node's `ca` option): both, once each. Go clients
 * pick the client certificate to present by that list, so the aggregator sends its front-proxy certificate only
 * if the requestheader CA is in it.
 */
export function caBundleOf(settings: AuthenticationSettings): string {
  const seen = new Set<string>();
  const pems: string[] = [];
  for (const cert of [...(settings.requestHeader?.roots ?? []), ...(settings.clientCa?.roots ?? [])]) {
    if (seen.has(cert.fingerprint256)) continue;
    seen.add(cert.fingerprint256);
    pems.push(cert.toString().trim());
  }
  return pems.length ? `${pems.join('\n')}\n` : '';
}
