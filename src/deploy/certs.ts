/**
 * Serving certificates. With cert-manager: a self-signed Issuer and one Certificate per server (the conversion
 * webhook, sandbox-apiserver), their CA injected into the CRDs / the APIService by cert-manager's cainjector.
 * Without: the operator manages its webhook certificate itself (--manage-webhook-certs: a Secret and the CRDs'
 * caBundle), and the chart generates sandbox-apiserver's (a CA and a serving certificate, kept across upgrades by
 * looking the Secret up) — the APIService needs its caBundle before any replica runs, and two replicas must serve
 * the same certificate, which a self-managed one per replica would not.
 */
import { APISERVICE_NAME } from '../cluster/aggregated.js';
import { APISERVER, meta, OPERATOR, type BuildContext, type Part } from './model.js';
import { Param, type Manifest } from './params.js';
import { APISERVER_TLS_SECRET, WEBHOOK_SERVICE, WEBHOOK_TLS_SECRET } from './workloads.js';

export const ISSUER = 'sandbox-selfsigned';
export const WEBHOOK_CERTIFICATE = 'sandbox-webhook';

const CERT_MANAGER = 'cert-manager.io/v1';

function serviceNames(c: BuildContext, service: string): Array<string | Param> {
  return [c.p.join([`${service}.`, c.ns, '.svc']), c.p.join([`${service}.`, c.ns, '.svc.cluster.local'])];
}

function certificate(c: BuildContext, name: string, component: string, service: string, secretName: string): Manifest {
  return {
    apiVersion: CERT_MANAGER,
    kind: 'Certificate',
    metadata: meta(name, component, c.ns),
    spec: {
      secretName,
      dnsNames: serviceNames(c, service),
      issuerRef: { kind: 'Issuer', name: ISSUER },
      privateKey: { algorithm: 'ECDSA', size: 256, rotationPolicy: 'Always' },
    },
  };
}

export function certManagerParts(c: BuildContext): Part[] {
  if (!c.variant.certManager) return [];
  const issuer: Manifest = {
    apiVersion: CERT_MANAGER,
    kind: 'Issuer',
    metadata: meta(ISSUER, OPERATOR, c.ns),
    spec: { selfSigned: {} },
  };
  const cert =
    c.variant.layout === 'crd'
      ? certificate(c, WEBHOOK_CERTIFICATE, OPERATOR, WEBHOOK_SERVICE, WEBHOOK_TLS_SECRET)
      : certificate(c, APISERVER, APISERVER, APISERVER, APISERVER_TLS_SECRET);
  return [{ file: 'certificates.yaml', objects: [issuer, cert] }];
}

/** `cert-manager.io/inject-ca-from` for objects whose caBundle cert-manager fills in. */
export function injectCaFrom(c: BuildContext, certificateName: string): Record<string, string | Param> {
  return { 'cert-manager.io/inject-ca-from': c.p.join([c.ns, `/${certificateName}`]) };
}

const PREAMBLE = `{{- $secret := lookup "v1" "Secret" .Release.Namespace "${APISERVER_TLS_SECRET}" }}
{{- $ca := "" }}{{- $crt := "" }}{{- $key := "" }}
{{- if and $secret (index ($secret.data | default dict) "ca.crt") }}
{{- $ca = index $secret.data "ca.crt" }}{{- $crt = index $secret.data "tls.crt" }}{{- $key = index $secret.data "tls.key" }}
{{- else }}
{{- $svc := printf "${APISERVER}.%s.svc" .Release.Namespace }}
{{- $gen := genCA "${APISERVER}-ca" 3650 }}
{{- $cert := genSignedCert $svc nil (list $svc (printf "%s.cluster.local" $svc)) 3650 $gen }}
{{- $ca = $gen.Cert | b64enc }}{{- $crt = $cert.Cert | b64enc }}{{- $key = $cert.Key | b64enc }}
{{- end }}
`;

function apiService(c: BuildContext, caBundle: Param | undefined): Manifest {
  return {
    apiVersion: 'apiregistration.k8s.io/v1',
    kind: 'APIService',
    metadata: { ...meta(APISERVICE_NAME, APISERVER), ...(caBundle ? {} : { annotations: injectCaFrom(c, APISERVER) }) },
    spec: {
      group: 'agents.x-k8s.io',
      version: 'v1beta1',
      service: { namespace: c.ns, name: APISERVER, port: 443 },
      ...(caBundle ? { caBundle } : {}),
      groupPriorityMinimum: 1000,
      versionPriority: 15,
    },
  };
}

/** The APIService with its caBundle: injected by cert-manager, or from the chart-generated CA (Helm only). */
export function apiServiceParts(c: BuildContext): Part[] {
  if (c.variant.certManager) return [{ file: 'apiservice.yaml', objects: [apiService(c, undefined)] }];
  const secret: Manifest = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: meta(APISERVER_TLS_SECRET, APISERVER, c.ns),
    type: 'kubernetes.io/tls',
    data: {
      'ca.crt': new Param('$ca', undefined),
      'tls.crt': new Param('$crt', undefined),
      'tls.key': new Param('$key', undefined),
    },
  };
  return [
    { file: 'apiservice.yaml', preamble: PREAMBLE, objects: [secret, apiService(c, new Param('$ca', undefined))] },
  ];
}
