/**
 * Every error code this project throws, in one table: what the code means and the HTTP status a client gets when
 * an error with it reaches one of our HTTP servers (sandboxd, the kubelet API, the conversion webhook,
 * sandbox-apiserver; src/error-http.ts derives each server's mapping from this table). Codes are `area.kebab-case`;
 * callers and tests match on them, so a code is renamed only together with every match. docs/errors.md says how to
 * add one.
 *
 * The status is chosen for the client of the server the error reaches, not for the layer that threw it: a failed
 * call to kube-apiserver (`kube.*`) inside a request is our server's failure (500) whatever kube-apiserver answered,
 * and a guest that breaks the protocol is a bad upstream (502).
 */

export interface ErrorCodeInfo {
  /** HTTP status on every surface. */
  readonly status: number;
  readonly meaning: string;
}

export const ERROR_CODES = {
  // The guest agent link (src/guest/agent-*.ts, docs/agent-protocol.md).
  'agent.aborted': { status: 503, meaning: 'the caller aborted a request to the guest agent before it was answered' },
  'agent.disconnected': { status: 502, meaning: 'the connection to the guest agent closed or failed (the VM stopped)' },
  'agent.file-too-large': { status: 400, meaning: 'a guest file is larger than the limit the caller gave' },
  'agent.frame-too-large': {
    status: 413,
    meaning: 'a frame over the wire protocol limit: request arguments too large to send, or a guest that sent one',
  },
  'agent.invalid-argument': { status: 400, meaning: 'an argument the agent client refuses before sending (a signal)' },
  'agent.protocol': { status: 502, meaning: 'the guest agent broke the wire protocol' },
  'agent.timeout': { status: 504, meaning: 'a request got no answer from the guest agent in time' },
  'agent.unreachable': { status: 502, meaning: "the guest agent's socket could not be connected" },
  'agent.unresponsive': { status: 504, meaning: 'the guest agent did not answer the handshake in time' },
  'agent.version': { status: 502, meaning: 'the guest agent speaks another protocol version (rebuild the image)' },
  // The errno an agent operation failed with (AGENT_ERRNO_CODES in src/guest/agent-errors.ts).
  'agent.eacces': { status: 400, meaning: 'the guest refused: permission denied' },
  'agent.eaddrinuse': { status: 409, meaning: 'the guest port is already in use (another service listens on it)' },
  'agent.ebusy': { status: 409, meaning: 'the guest refused: the id or resource is in use' },
  'agent.ecanceled': { status: 503, meaning: 'the guest cancelled the operation (its stream or session ended)' },
  'agent.econnrefused': { status: 502, meaning: 'nothing listens on the guest port' },
  'agent.eexist': { status: 409, meaning: 'the guest refused: the path exists' },
  'agent.eframetoolarge': { status: 413, meaning: 'the guest refused a frame over its limit' },
  'agent.einternal': { status: 502, meaning: 'the guest agent failed internally' },
  'agent.einval': { status: 400, meaning: 'the guest refused an invalid argument' },
  'agent.eio': { status: 502, meaning: 'the guest failed with an I/O error' },
  'agent.eisdir': { status: 400, meaning: 'the guest refused: the path is a directory' },
  'agent.elimit': { status: 503, meaning: 'the guest agent runs too many operations at once; retry' },
  'agent.enoent': { status: 400, meaning: 'no such file, directory or command in the guest' },
  'agent.enotdir': { status: 400, meaning: 'the guest refused: a path component is not a directory' },
  'agent.enotempty': { status: 409, meaning: 'the guest refused: the directory is not empty' },
  'agent.enotsup': {
    status: 409,
    meaning: 'the guest cannot do this (a filesystem pause of an image with no overlay layer, an older initramfs)',
  },
  'agent.eproto': { status: 502, meaning: 'the guest agent saw a protocol violation from the host' },
  'agent.errno': { status: 502, meaning: 'the guest failed with an errno no other code names (in the message)' },
  'agent.esrch': { status: 400, meaning: 'the guest has no such process' },
  'agent.eunknownop': { status: 502, meaning: 'the guest agent is older than the host (rebuild the image)' },

  // The VMM (src/vmm).
  'vm.boot-failed': { status: 500, meaning: 'a template VM did not boot' },
  'vm.destroyed': { status: 409, meaning: 'the VM was destroyed while the operation ran' },
  'vm.exists': { status: 409, meaning: 'a VM with this id exists' },
  'vm.gone': { status: 410, meaning: "the VM's QEMU process is gone; destroy the VM" },
  'vm.image-missing': { status: 500, meaning: 'a guest image file is missing' },
  'vm.invalid-argument': {
    status: 400,
    meaning: 'an argument the VMM refuses (fork count, a network policy on a NIC-less VM)',
  },
  'vm.invalid-state': { status: 409, meaning: "the VM's state does not allow the operation (paused, hibernated)" },
  'vm.kill': { status: 500, meaning: "QEMU cannot be signalled (sandboxd lacks CAP_KILL for another user's process)" },
  'vm.migration-failed': { status: 500, meaning: 'QEMU failed to save VM state' },
  'vm.migration-timeout': { status: 504, meaning: 'saving VM state did not finish in time' },
  'vm.not-found': { status: 404, meaning: 'no VM with this id in the run directory' },
  'vm.not-loaded': { status: 500, meaning: 'the VM has no loaded state to resume (an internal ordering error)' },
  'vm.process-exited': { status: 500, meaning: 'QEMU exited while the VM started or ran' },
  'vm.restore-failed': { status: 500, meaning: 'QEMU could not load a snapshot (it does not match this QEMU)' },
  'vm.restore-timeout': { status: 504, meaning: 'loading a snapshot did not finish in time' },
  'vm.running': { status: 409, meaning: 'the VM is running (destroy it instead)' },
  'vm.simulated': {
    status: 409,
    meaning: 'the VM is simulated (sandboxd --engine=sim): it has no guest to exec in, copy files to or forward to',
  },
  'vm.spawn-failed': { status: 500, meaning: 'QEMU could not be started' },
  'vm.network': { status: 500, meaning: "a networked VM's namespace, veth, TAP or ruleset could not be made" },
  'vm.start-timeout': { status: 504, meaning: 'the VM was not ready in time' },
  'vm.state-missing': { status: 410, meaning: "a hibernated VM's saved state is missing; it cannot be woken" },
  'vm.stop-timeout': { status: 504, meaning: 'QEMU did not exit in time' },
  'host.qemu-missing': { status: 500, meaning: 'qemu-system-x86_64 is not installed' },
  'host.tsc-unknown': { status: 500, meaning: "the host's TSC frequency cannot be determined" },
  'qmp.disconnected': { status: 500, meaning: 'the QMP connection to QEMU closed' },
  'qmp.error': { status: 500, meaning: 'QEMU answered a QMP command with an error' },
  'qmp.protocol': { status: 500, meaning: 'QEMU sent a QMP message we cannot read' },
  'qmp.timeout': { status: 504, meaning: 'QEMU did not answer on QMP in time' },
  'qmp.unreachable': { status: 500, meaning: "QEMU's QMP socket could not be connected" },
  'template.invalid': { status: 500, meaning: 'a VM template directory holds no valid template' },
  'template.missing': { status: 500, meaning: 'a VM template has no snapshot' },
  'template.unknown': { status: 400, meaning: 'no guest template of this name' },
  'template.warmup-failed': { status: 500, meaning: "a template's warmup command failed" },

  // Building guest images (src/guest/build).
  'guest.build-failed': { status: 500, meaning: 'a guest image build step failed' },
  'guest.build-locked': { status: 500, meaning: 'another process holds the guest build lock' },
  'guest.busybox-missing': { status: 500, meaning: 'busybox-static is not installed' },
  'guest.go-missing': { status: 500, meaning: 'the Go toolchain is not installed' },
  'guest.kernel-source-missing': { status: 500, meaning: 'the Linux kernel source package is not installed' },
  'guest.rootfs-resolve': { status: 500, meaning: "the root file system's Debian packages cannot be resolved" },
  'guest.prebuilt-missing': {
    status: 500,
    meaning: 'SBX_GUEST_IMAGES names a directory without the exported image of a template (src/guest/prebuilt.ts)',
  },

  // sandboxd (src/sandboxd; the wire contract is docs/sandboxd-api.md).
  'sandboxd.at-capacity': { status: 429, meaning: 'the node holds --max-claims claims' },
  'sandboxd.bad-request': { status: 400, meaning: 'the request is malformed (the message names the field)' },
  'sandboxd.conflict': {
    status: 409,
    meaning: 'the request conflicts with a live claim or the sandbox state (paused, hibernated)',
  },
  'sandboxd.draining': {
    status: 429,
    meaning:
      'the node is draining (POST /v1/drain, or its Node is cordoned): it makes no new claim and wakes no sandbox; claim on another node',
  },
  'sandboxd.flags': { status: 500, meaning: "sandboxd's flags are invalid" },
  'sandboxd.gateway-not-ready': {
    status: 503,
    meaning: 'the claim gateway has not read the SandboxWarmPools and SandboxTemplates yet (just started); retry',
  },
  'sandboxd.forbidden': { status: 403, meaning: 'the token may not use this route (operator token required)' },
  'sandboxd.http': { status: 502, meaning: 'a sandboxd node answered a call with an HTTP error' },
  'sandboxd.method-not-allowed': { status: 405, meaning: 'the route does not take this method' },
  'sandboxd.not-found': { status: 404, meaning: 'no such route, sandbox or checkpoint' },
  'sandboxd.quota-exceeded': {
    status: 403,
    meaning: "the sandbox's namespace (or tenant) holds --max-checkpoints-per-namespace checkpoints on this node",
  },
  'sandboxd.pool-not-served': {
    status: 503,
    meaning: "the claim gateway's node keeps no warm pool of the claim's pool key (claim on a node that does)",
  },
  'sandboxd.state': { status: 500, meaning: "sandboxd's state file cannot be read" },
  'sandboxd.state-write': {
    status: 503,
    meaning: "sandboxd could not write a new claim to its claim table (its data dir's disk); the claim was undone",
  },
  'sandboxd.layer-too-large': {
    status: 413,
    meaning: "a filesystem pause's saved files are over --max-layer-mib; nothing was paused, the sandbox runs on",
  },
  'sandboxd.too-large': { status: 413, meaning: 'a claim gateway request body over the 1 MiB cap' },
  'sandboxd.unauthorized': { status: 401, meaning: 'no token, or a token this node does not know' },
  'sandboxd.unreachable': { status: 503, meaning: 'a sandboxd node did not answer a call' },
  'sandboxd.warm-miss': { status: 429, meaning: 'a warm_only claim found no warm sandbox' },

  // Checkpoint placement across sandboxd nodes (src/sandboxd/placement, docs/placement.md).
  'placement.bad-record': {
    status: 502,
    meaning: 'a peer served a checkpoint record this node refuses (nothing kept)',
  },
  'placement.busy': { status: 503, meaning: "the node's concurrent checkpoint pulls are at their cap (Retry-After)" },
  'placement.changed': { status: 500, meaning: 'a checkpoint file changed while this node served it to a peer' },
  'placement.deleted': { status: 404, meaning: 'the checkpoint was deleted while this node was pulling it' },
  'placement.off': {
    status: 409,
    meaning: "the node keeps no copies of peers' checkpoints (--checkpoint-replicas 1)",
  },
  'placement.heal-failed': { status: 502, meaning: 'no owner served the checkpoint whole within the heal budget' },
  'placement.truncated': { status: 502, meaning: 'a checkpoint record stream broke off mid-transfer (nothing kept)' },

  // The virtual kubelet's kubelet API (src/sandboxd/vk/kubelet-server.ts).
  'kubelet.bad-request': { status: 400, meaning: 'the kubelet API request is malformed or not served' },
  'kubelet.forbidden': { status: 403, meaning: 'the client certificate may not use the kubelet API' },
  'kubelet.method-not-allowed': { status: 405, meaning: 'the kubelet route does not take this method' },
  'kubelet.no-running-vm': { status: 409, meaning: 'the pod has no running microVM' },
  'kubelet.not-found': { status: 404, meaning: 'no such route, pod or container on this node' },
  'kubelet.unauthorized': { status: 401, meaning: 'no client certificate of the cluster CA' },

  // The conversion webhook and conversion (src/operator/webhook, src/api/conversion).
  'conversion.failed': {
    status: 400,
    meaning: 'an object cannot be converted (the webhook reports it in the ConversionReview, HTTP 200)',
  },
  'webhook.cert-policy-invalid': { status: 500, meaning: 'certificate validity does not exceed its renew window' },
  'webhook.certs-contended': { status: 500, meaning: 'the certificate Secret could not be settled among replicas' },
  'webhook.certs-missing': { status: 500, meaning: 'the provided certificate directory holds no pair' },
  'webhook.invalid-url': { status: 500, meaning: '--webhook-url is not a URL' },
  'webhook.method-not-allowed': { status: 405, meaning: 'the webhook route does not take this method' },
  'webhook.not-found': { status: 404, meaning: 'no such webhook route' },
  'webhook.store-missing': { status: 500, meaning: 'managed certificates without a Kubernetes client' },

  // sandbox-apiserver (src/apiserver): one code per Kubernetes StatusReason it answers with (status.ts), plus its own.
  'apiserver.already-exists': { status: 409, meaning: 'Status AlreadyExists' },
  'apiserver.auth-config': { status: 500, meaning: 'the delegated authentication configuration is unusable' },
  'apiserver.bad-request': { status: 400, meaning: 'Status BadRequest (also a request path that does not parse)' },
  'apiserver.cert': { status: 500, meaning: 'the serving certificate cannot be read' },
  'apiserver.conflict': { status: 409, meaning: 'Status Conflict' },
  'apiserver.expired': { status: 410, meaning: 'Status Expired' },
  'apiserver.flags': { status: 500, meaning: "sandbox-apiserver's flags are invalid" },
  'apiserver.forbidden': { status: 403, meaning: 'Status Forbidden' },
  'apiserver.gone': { status: 410, meaning: 'Status Gone' },
  'apiserver.internal-error': { status: 500, meaning: 'Status InternalError' },
  'apiserver.invalid': { status: 422, meaning: 'Status Invalid' },
  'apiserver.method-not-allowed': { status: 405, meaning: 'Status MethodNotAllowed' },
  'apiserver.not-acceptable': { status: 406, meaning: 'Status NotAcceptable' },
  'apiserver.not-found': { status: 404, meaning: 'Status NotFound' },
  'apiserver.request-entity-too-large': { status: 413, meaning: 'Status RequestEntityTooLarge' },
  'apiserver.service-unavailable': { status: 503, meaning: 'Status ServiceUnavailable' },
  'apiserver.timeout': { status: 504, meaning: 'Status Timeout' },
  'apiserver.too-many-requests': { status: 429, meaning: 'Status TooManyRequests' },
  'apiserver.unauthorized': { status: 401, meaning: 'Status Unauthorized' },
  'apiserver.unsupported-media-type': { status: 415, meaning: 'Status UnsupportedMediaType' },

  // Our calls to kube-apiserver (src/kube). A Status answer is `kube.<its reason>` (KUBE_CODE_BY_REASON).
  'kube.aborted': { status: 500, meaning: 'a Kubernetes API call was aborted by its signal' },
  'kube.config': { status: 500, meaning: 'the kubeconfig is unusable' },
  'kube.decode': { status: 500, meaning: 'kube-apiserver answered with JSON that does not parse' },
  'kube.leader-election': { status: 500, meaning: 'the leader election timings are inconsistent' },
  'kube.transport': { status: 500, meaning: 'a Kubernetes API call failed below HTTP (connection, TLS)' },
  'kube.already-exists': { status: 500, meaning: 'kube-apiserver answered AlreadyExists' },
  'kube.bad-request': { status: 500, meaning: 'kube-apiserver answered BadRequest' },
  'kube.conflict': { status: 500, meaning: 'kube-apiserver answered Conflict' },
  'kube.expired': { status: 500, meaning: 'kube-apiserver answered Expired' },
  'kube.forbidden': { status: 500, meaning: 'kube-apiserver answered Forbidden' },
  'kube.gone': { status: 500, meaning: 'kube-apiserver answered Gone' },
  'kube.internal-error': { status: 500, meaning: 'kube-apiserver answered InternalError' },
  'kube.invalid': { status: 500, meaning: 'kube-apiserver answered Invalid' },
  'kube.method-not-allowed': { status: 500, meaning: 'kube-apiserver answered MethodNotAllowed' },
  'kube.not-acceptable': { status: 500, meaning: 'kube-apiserver answered NotAcceptable' },
  'kube.not-found': { status: 500, meaning: 'kube-apiserver answered NotFound' },
  'kube.request-entity-too-large': { status: 500, meaning: 'kube-apiserver answered RequestEntityTooLarge' },
  'kube.server-timeout': { status: 500, meaning: 'kube-apiserver answered ServerTimeout' },
  'kube.service-unavailable': { status: 500, meaning: 'kube-apiserver answered ServiceUnavailable' },
  'kube.timeout': { status: 500, meaning: 'a Kubernetes API call got no answer in time, or the answer Timeout' },
  'kube.too-many-requests': { status: 500, meaning: 'kube-apiserver answered TooManyRequests' },
  'kube.unauthorized': { status: 500, meaning: 'kube-apiserver answered Unauthorized' },
  'kube.unknown': { status: 500, meaning: 'kube-apiserver answered with a reason no other code names' },
  'kube.unsupported-media-type': { status: 500, meaning: 'kube-apiserver answered UnsupportedMediaType' },
  'controller.terminal': { status: 500, meaning: 'a reconcile failed in a way retrying cannot fix' },

  // The operator (src/operator). Claim reasons are the SandboxClaim's Ready reasons (CLAIM_REASON_CODES).
  'claim.claim-expired': { status: 410, meaning: 'Ready reason ClaimExpired' },
  'claim.create': { status: 500, meaning: 'creating a cold Sandbox for a claim failed' },
  'claim.deferred': { status: 500, meaning: 'not an error: the claim pass writes nothing and requeues' },
  'claim.env': { status: 400, meaning: 'claim env cannot be injected (no such container, or not allowed)' },
  'claim.env-vars-injection-rejected': { status: 400, meaning: 'Ready reason EnvVarsInjectionRejected' },
  'claim.invalid-metadata': { status: 400, meaning: 'Ready reason InvalidMetadata' },
  'claim.metadata': { status: 500, meaning: "the claim's template is gone while its metadata is synced" },
  'claim.metadata-conflict': { status: 400, meaning: "the claim's pod metadata contradicts the template's" },
  'claim.pool-not-served': {
    status: 503,
    meaning: 'Ready reason PoolNotServed (aggregated layout: no node serves the pool)',
  },
  'claim.reconciler-error': { status: 500, meaning: 'Ready reason ReconcilerError' },
  'claim.sandbox-create-pending': { status: 409, meaning: 'Ready reason SandboxCreatePending' },
  'claim.sandbox-expired': { status: 410, meaning: 'Ready reason SandboxExpired' },
  'claim.sandbox-missing': { status: 404, meaning: 'Ready reason SandboxMissing' },
  'claim.sandbox-not-ready': { status: 503, meaning: 'Ready reason SandboxNotReady' },
  'claim.template-not-found': { status: 404, meaning: 'Ready reason TemplateNotFound' },
  'claim.volume-claim-templates-error': { status: 400, meaning: 'Ready reason VolumeClaimTemplatesError' },
  'claim.warm-pool-not-found': { status: 404, meaning: 'Ready reason WarmPoolNotFound' },
  'operator.flags': { status: 500, meaning: "sandbox-operator's flags are invalid" },
  'runtime.conflict': { status: 400, meaning: "the Pod contradicts its runtime's placement (docs/runtime-adapter.md)" },
  'sandbox.children': { status: 500, meaning: "writing a Sandbox's children failed" },
  'sandbox.expiry': { status: 500, meaning: "tearing down an expired Sandbox's children failed" },
  'sandbox-template.network-policy': { status: 409, meaning: 'the NetworkPolicy is not controlled by the template' },

  // Certificates (src/pki), the local cluster (src/cluster) and the CLI (src/cli).
  'pki.invalid-request': { status: 400, meaning: 'a certificate request is invalid (names, usages, CA pair)' },
  'cluster.apiservice': { status: 500, meaning: 'the APIService did not become Available' },
  'cluster.binary-broken': { status: 500, meaning: 'a Kubernetes binary does not run' },
  'cluster.binary-missing': { status: 500, meaning: 'a Kubernetes binary is missing' },
  'cluster.build': { status: 500, meaning: 'building a Kubernetes binary failed' },
  'cluster.download': { status: 500, meaning: 'downloading a binary or kwok stage failed' },
  'cluster.image': { status: 500, meaning: "a real node's local image archive cannot be built" },
  'cluster.kubectl': { status: 500, meaning: 'a kubectl command failed' },
  'cluster.network': { status: 500, meaning: "the local cluster's network namespace cannot be made" },
  'cluster.no-go': { status: 500, meaning: 'no usable Go toolchain to build a binary' },
  'cluster.not-ready': { status: 500, meaning: 'kube-apiserver did not become ready' },
  'cluster.pki': { status: 500, meaning: "the local cluster's CA cannot be read" },
  'cluster.process': { status: 500, meaning: 'a control-plane process cannot be started' },
  'cluster.process-died': { status: 500, meaning: 'a control-plane process exited' },
  'cluster.real-node': { status: 500, meaning: 'a real worker node (kubelet, containerd) cannot be started' },
  // The install manifests' generator (src/deploy, npm run generate).
  'deploy.flags': { status: 500, meaning: "a manifest passes a flag its component's option definitions reject" },
  'deploy.helm': { status: 500, meaning: 'the install variants cannot be merged into one Helm template' },
  'deploy.kustomize': { status: 500, meaning: 'a Helm-only part is in a kustomize variant' },
  'deploy.param': {
    status: 500,
    meaning: 'a chart value is used where it cannot go (a block inside a string, a Helm-only value in kustomize)',
  },
  'deploy.values': { status: 500, meaning: "a chart value is used that the chart's values do not define" },
  'cli.already-running': { status: 500, meaning: 'a platform is running already' },
  'cli.up-failed': { status: 500, meaning: 'the platform did not start' },
  'cli.usage': { status: 400, meaning: 'a command-line flag is invalid' },
  'platform.component-died': { status: 500, meaning: 'a platform component exited' },
  'platform.not-ready': { status: 500, meaning: 'a platform component did not become ready' },
  'platform.bad-profile-spec': { status: 400, meaning: 'SBX_PROFILE is not <regexp>:<dir>' },
} as const satisfies Record<string, ErrorCodeInfo>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The style every code follows: `area.kebab-case`, both parts lower case. */
export const ERROR_CODE_STYLE = /^[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z][a-z0-9]*(-[a-z0-9]+)*$/;
