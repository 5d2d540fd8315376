/**
 * The workloads and their Services: sandbox-operator (Deployment, webhook and metrics Services, PDB),
 * sandboxd (DaemonSet, its kubeconfig, metrics Service) and sandbox-apiserver (Deployment, Service, APIService,
 * PDB). Container args come from the binaries' option definitions (flags.ts).
 */
import { apiServerCommand } from '../apiserver/options.js';
import { operatorCommand } from '../operator/options.js';
import { sandboxdCommand } from '../sandboxd/options.js';
import { containerArgs, type FlagValue } from './flags.js';
import { labels, meta, selector, APISERVER, OPERATOR, SANDBOXD, type BuildContext } from './model.js';
import type { Manifest } from './params.js';

export const WEBHOOK_SERVICE = 'sandbox-webhook-service';
export const WEBHOOK_CERT_DIR = '/tmp/k8s-webhook-server/serving-certs';
/** The Secret cert-manager writes the webhook's serving certificate to. */
export const WEBHOOK_TLS_SECRET = 'sandbox-webhook-tls';
export const APISERVER_TLS_SECRET = 'sandbox-apiserver-tls';
/** The fleet's sandboxd root token: created by the installer (README), read by sandboxd and sandbox-apiserver. */
export const SANDBOXD_TOKEN_SECRET = 'sandboxd-token';
const SANDBOXD_TOKEN_DIR = '/var/run/secrets/sandboxd';
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export const PORTS = {
  operatorMetrics: 8080,
  operatorHealth: 8081,
  webhook: 9443,
  sandboxd: 7777,
  kubelet: 10250,
  apiserver: 6443,
};

/** Hardened container defaults: no privilege escalation, no capabilities, read-only root, the runtime's seccomp. */
function restricted(): Manifest {
  return {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'] },
    readOnlyRootFilesystem: true,
    runAsNonRoot: true,
    runAsUser: 65532,
    runAsGroup: 65532,
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

const fieldEnv = (name: string, fieldPath: string) => ({ name, valueFrom: { fieldRef: { fieldPath } } });

function podSpec(c: BuildContext, component: 'operator' | 'apiserver' | 'sandboxd', spec: Manifest): Manifest {
  return {
    serviceAccountName: component === 'operator' ? OPERATOR : component === 'apiserver' ? APISERVER : SANDBOXD,
    nodeSelector: c.p.block(`${component}.nodeSelector`),
    tolerations: c.p.block(`${component}.tolerations`),
    ...spec,
  };
}

function container(c: BuildContext, component: 'operator' | 'apiserver' | 'sandboxd', spec: Manifest): Manifest {
  return {
    name: component === 'operator' ? OPERATOR : component === 'apiserver' ? APISERVER : SANDBOXD,
    image: c.p.value(`images.${component}`),
    imagePullPolicy: c.p.value('images.pullPolicy'),
    resources: c.p.block(`${component}.resources`),
    ...spec,
  };
}

/** A Deployment of one non-root container, its replicas from `<component>.replicas`. */
function deployment(
  c: BuildContext,
  component: 'operator' | 'apiserver',
  name: string,
  pod: { securityContext?: Manifest; container: Manifest; volumes: Manifest[] },
): Manifest {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta(name, name, c.ns),
    spec: {
      replicas: c.p.value(`${component}.replicas`),
      selector: { matchLabels: selector(name) },
      template: {
        metadata: { labels: labels(name) },
        spec: podSpec(c, component, {
          securityContext: { runAsNonRoot: true, ...pod.securityContext, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [container(c, component, { ...pod.container, securityContext: restricted() })],
          volumes: pod.volumes,
        }),
      },
    },
  };
}

function pdb(name: string, c: BuildContext): Manifest {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: meta(name, name, c.ns),
    spec: { maxUnavailable: 1, selector: { matchLabels: selector(name) } },
  };
}

function service(name: string, component: string, c: BuildContext, ports: Manifest[], headless = false): Manifest {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(name, component, c.ns),
    spec: { ...(headless ? { clusterIP: 'None' } : {}), selector: selector(component), ports },
  };
}

export function operatorFlags(c: BuildContext): Array<readonly [string, FlagValue]> {
  return [
    ['default-runtime', c.p.value('defaultRuntime')],
    ['leader-elect', true],
    ['webhook-namespace', c.ns],
    ['webhook-service-name', WEBHOOK_SERVICE],
    ['webhook-port', PORTS.webhook],
    ['webhook-cert-dir', WEBHOOK_CERT_DIR],
    ['manage-webhook-certs', !c.variant.certManager],
    ['metrics-bind-address', `:${PORTS.operatorMetrics}`],
    ['health-probe-bind-address', `:${PORTS.operatorHealth}`],
    ['zap-log-level', c.p.value('operator.logLevel')],
    ['disable-sandbox-events', c.p.value('operator.disableSandboxEvents')],
  ];
}

export function operatorObjects(c: BuildContext): Manifest[] {
  const certVolume = c.variant.certManager
    ? { name: 'webhook-certs', secret: { secretName: WEBHOOK_TLS_SECRET } }
    : { name: 'webhook-certs', emptyDir: {} };
  const probe = (path: string) => ({ httpGet: { path, port: 'health' }, periodSeconds: 10 });
  const operator = deployment(c, 'operator', OPERATOR, {
    container: {
      args: containerArgs({ command: operatorCommand, flags: operatorFlags(c) }, c.p),
      ports: [
        { name: 'webhook', containerPort: PORTS.webhook, protocol: 'TCP' },
        { name: 'metrics', containerPort: PORTS.operatorMetrics, protocol: 'TCP' },
        { name: 'health', containerPort: PORTS.operatorHealth, protocol: 'TCP' },
      ],
      livenessProbe: probe('/healthz'),
      readinessProbe: probe('/readyz'),
      volumeMounts: [{ name: 'webhook-certs', mountPath: WEBHOOK_CERT_DIR, readOnly: c.variant.certManager }],
    },
    volumes: [certVolume],
  });
  return [
    operator,
    service(WEBHOOK_SERVICE, OPERATOR, c, [{ name: 'https', port: 443, targetPort: 'webhook', protocol: 'TCP' }]),
    service(`${OPERATOR}-metrics`, OPERATOR, c, [
      { name: 'metrics', port: PORTS.operatorMetrics, targetPort: 'metrics', protocol: 'TCP' },
    ]),
    pdb(OPERATOR, c),
  ];
}

const SANDBOXD_KUBECONFIG = '/etc/sandboxd/kubeconfig';
const SANDBOXD_DATA = '/var/lib/sandboxd';
/** The sandboxd image's SBX_CACHE_DIR (deploy/images): VM templates are made under it at run time. */
export const SANDBOXD_CACHE = '/var/cache/sandbox-operator';

export function sandboxdFlags(c: BuildContext): Array<readonly [string, FlagValue]> {
  const crd = c.variant.layout === 'crd';
  return [
    ['node-name', '$(NODE_NAME)'],
    ['listen', `0.0.0.0:${PORTS.sandboxd}`],
    ['advertise-addr', `$(POD_IP):${PORTS.sandboxd}`],
    ['data-dir', SANDBOXD_DATA],
    ['token-file', `${SANDBOXD_TOKEN_DIR}/token`],
    ['kubeconfig', SANDBOXD_KUBECONFIG],
    ['max-claims', c.p.value('sandboxd.maxClaims')],
    ['checkpoint-replicas', c.p.value('sandboxd.checkpointReplicas')],
    ['pools', c.p.value('sandboxd.pools')],
    // The CRD layout's Pods run on sandboxd's virtual-kubelet nodes; the aggregated layout has no Pods.
    ...(crd
      ? ([
          ['kubelet-address', '$(POD_IP)'],
          ['kubelet-port', PORTS.kubelet],
          ['kubelet-client-ca', `${SA_DIR}/ca.crt`],
        ] as const)
      : ([['vk-nodes', '']] as const)),
    ['log-level', c.p.value('sandboxd.logLevel')],
  ];
}

export function sandboxdObjects(c: BuildContext): Manifest[] {
  const crd = c.variant.layout === 'crd';
  // A kubeconfig on the pod's own ServiceAccount token: sandboxd talks to the API only when given one.
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'in-cluster',
        cluster: { server: 'https://kubernetes.default.svc', 'certificate-authority': `${SA_DIR}/ca.crt` },
      },
    ],
    users: [{ name: SANDBOXD, user: { 'token-file': `${SA_DIR}/token` } }],
    contexts: [{ name: 'in-cluster', context: { cluster: 'in-cluster', user: SANDBOXD } }],
    'current-context': 'in-cluster',
  };
  const emptyDir = (name: string) => ({ name, emptyDir: {} });
  const ports = [
    { name: 'api', containerPort: PORTS.sandboxd, protocol: 'TCP' },
    ...(crd
      ? [
          { name: 'kubelet-vk', containerPort: PORTS.kubelet, protocol: 'TCP' },
          { name: 'kubelet-sbx', containerPort: PORTS.kubelet + 1, protocol: 'TCP' },
        ]
      : []),
  ];
  const daemonSet: Manifest = {
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: meta(SANDBOXD, SANDBOXD, c.ns),
    spec: {
      selector: { matchLabels: selector(SANDBOXD) },
      // One sandboxd per host at a time: two would fight over the host's data dir.
      updateStrategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } },
      template: {
        metadata: { labels: labels(SANDBOXD) },
        spec: podSpec(c, 'sandboxd', {
          // Claims are answered from VMs in this pod: give them time to be released cleanly.
          terminationGracePeriodSeconds: 60,
          containers: [
            container(c, 'sandboxd', {
              args: containerArgs({ command: sandboxdCommand, flags: sandboxdFlags(c) }, c.p),
              env: [fieldEnv('NODE_NAME', 'spec.nodeName'), fieldEnv('POD_IP', 'status.podIP')],
              ports,
              livenessProbe: { httpGet: { path: '/healthz', port: 'api' }, periodSeconds: 10 },
              readinessProbe: { httpGet: { path: '/healthz', port: 'api' }, periodSeconds: 5 },
              securityContext: {
                // Root to start QEMU, which drops to an unprivileged user (-runas): SETUID/SETGID for that;
                // NET_ADMIN and SYS_ADMIN (namespace mounts, setns) for networked VMs' namespaces, veths and
                // nftables rules, all inside this pod's own network namespace (docs/vm.md "Networking"). No
                // privileged mode, no host namespaces. KVM comes from a device plugin resource (see values.yaml);
                // without it VMs run under TCG.
                allowPrivilegeEscalation: false,
                // KILL: QEMU runs as another user, and stopping a VM signals it.
                capabilities: { drop: ['ALL'], add: ['SETUID', 'SETGID', 'KILL', 'NET_ADMIN', 'SYS_ADMIN'] },
                readOnlyRootFilesystem: true,
                runAsNonRoot: false,
                runAsUser: 0,
                seccompProfile: { type: 'RuntimeDefault' },
              },
              volumeMounts: [
                { name: 'data', mountPath: SANDBOXD_DATA },
                { name: 'templates', mountPath: `${SANDBOXD_CACHE}/vm` },
                // sandboxd's run root (VM sockets, per-VM dirs) and the networked VMs' slot files, both under
                // /run/sandbox-operator (src/sandboxd/engine.ts defaultRunRoot, src/vmm/options.ts): the root file
                // system is read-only, and these must not outlive the pod.
                { name: 'run', mountPath: '/run/sandbox-operator' },
                // `ip netns add` (networked VMs) bind-mounts namespaces here; the pod's own, not the host's.
                { name: 'netns', mountPath: '/run/netns' },
                { name: 'tmp', mountPath: '/tmp' },
                { name: 'token', mountPath: SANDBOXD_TOKEN_DIR, readOnly: true },
                { name: 'kubeconfig', mountPath: '/etc/sandboxd', readOnly: true },
              ],
            }),
          ],
          volumes: [
            // The claim table, checkpoints and the kubelet serving certificate survive a pod restart.
            { name: 'data', hostPath: { path: c.p.value('sandboxd.dataHostPath'), type: 'DirectoryOrCreate' } },
            emptyDir('templates'),
            emptyDir('run'),
            emptyDir('netns'),
            emptyDir('tmp'),
            { name: 'token', secret: { secretName: SANDBOXD_TOKEN_SECRET, defaultMode: 0o400 } },
            { name: 'kubeconfig', configMap: { name: `${SANDBOXD}-kubeconfig` } },
          ],
        }),
      },
    },
  };
  return [
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: meta(`${SANDBOXD}-kubeconfig`, SANDBOXD, c.ns),
      data: { kubeconfig: JSON.stringify(kubeconfig, null, 2) },
    },
    daemonSet,
    service(
      `${SANDBOXD}-metrics`,
      SANDBOXD,
      c,
      [{ name: 'api', port: PORTS.sandboxd, targetPort: 'api', protocol: 'TCP' }],
      true,
    ),
  ];
}

export function apiserverFlags(c: BuildContext): Array<readonly [string, FlagValue]> {
  return [
    ['secure-port', PORTS.apiserver],
    ['tls-cert-file', '/etc/sandbox-apiserver/tls/tls.crt'],
    ['tls-private-key-file', '/etc/sandbox-apiserver/tls/tls.key'],
    ['service-name', APISERVER],
    ['service-namespace', c.ns],
    ['sandboxd-token-file', `${SANDBOXD_TOKEN_DIR}/token`],
    ['disable-sandbox-events', c.p.value('apiserver.disableSandboxEvents')],
    ['log-level', c.p.value('apiserver.logLevel')],
  ];
}

export function apiserverObjects(c: BuildContext): Manifest[] {
  const probe = (path: string) => ({ httpGet: { path, port: 'https', scheme: 'HTTPS' }, periodSeconds: 10 });
  return [
    deployment(c, 'apiserver', APISERVER, {
      // Group-readable secrets through fsGroup: the server runs as a non-root user.
      securityContext: { fsGroup: 65532 },
      container: {
        args: containerArgs({ command: apiServerCommand, flags: apiserverFlags(c) }, c.p),
        ports: [{ name: 'https', containerPort: PORTS.apiserver, protocol: 'TCP' }],
        livenessProbe: probe('/livez'),
        readinessProbe: probe('/readyz'),
        volumeMounts: [
          { name: 'tls', mountPath: '/etc/sandbox-apiserver/tls', readOnly: true },
          { name: 'token', mountPath: SANDBOXD_TOKEN_DIR, readOnly: true },
        ],
      },
      volumes: [
        { name: 'tls', secret: { secretName: APISERVER_TLS_SECRET } },
        { name: 'token', secret: { secretName: SANDBOXD_TOKEN_SECRET, defaultMode: 0o440 } },
      ],
    }),
    service(APISERVER, APISERVER, c, [{ name: 'https', port: 443, targetPort: 'https', protocol: 'TCP' }]),
    pdb(APISERVER, c),
  ];
}
