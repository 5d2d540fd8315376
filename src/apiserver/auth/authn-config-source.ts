/**
 * The live authentication settings: ConfigMap kube-system/extension-apiserver-authentication, watched (one
 * informer on that one name, which RBAC role extension-apiserver-authentication-reader allows) and re-read on
 * every change, so a rotated front-proxy or client CA is trusted without a restart. A change that does not parse
 * keeps the settings in force (and is logged); a deleted ConfigMap trusts nothing until kube-apiserver writes it
 * again.
 */
import type { Registry } from 'prom-client';
import { errorMessage } from '../../errors.js';
import { Informer } from '../../kube/informer.js';
import type { KubeClient } from '../../kube/client.js';
import { ConfigMaps, type KubeObject } from '../../kube/resource.js';
import { silentLogger, type Logger } from '../../log/logger.js';
import {
  AUTHENTICATION_CONFIGMAP,
  caBundleOf,
  parseAuthenticationConfigMap,
  type AuthenticationConfig,
  type AuthenticationConfigProvider,
  type AuthenticationSettings,
} from './authn-config.js';

interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
}

export interface AuthenticationConfigSourceOptions {
  /** Defaults to kube-system/extension-apiserver-authentication (tests point it elsewhere). */
  namespace?: string;
  name?: string;
  logger?: Logger;
  registry?: Registry;
}

type Listener = (config: AuthenticationConfig, caBundle: string) => void;

export class AuthenticationConfigSource implements AuthenticationConfigProvider {
  private config: AuthenticationConfig = { generation: 0 };
  private bundle = '';
  /** The data last applied, so a resync or an unrelated metadata change is not a change. */
  private appliedData: string | undefined;
  private readonly listeners = new Set<Listener>();
  private readonly informer: Informer<ConfigMap>;
  private readonly log: Logger;
  private readonly where: string;

  constructor(client: KubeClient, opts: AuthenticationConfigSourceOptions = {}) {
    const namespace = opts.namespace ?? AUTHENTICATION_CONFIGMAP.namespace;
    const name = opts.name ?? AUTHENTICATION_CONFIGMAP.name;
    this.where = `ConfigMap ${namespace}/${name}`;
    this.log = (opts.logger ?? silentLogger).child({ component: 'authn-config', configMap: `${namespace}/${name}` });
    this.informer = new Informer<ConfigMap>(client, ConfigMaps, {
      namespace,
      fieldSelector: `metadata.name=${name}`,
      logger: opts.logger,
      registry: opts.registry,
    });
    this.informer.addHandler({
      onAdd: (cm) => this.apply(cm.data ?? {}),
      onUpdate: (_old, cm) => this.apply(cm.data ?? {}),
      onDelete: () => this.apply(undefined),
    });
  }

  get current(): AuthenticationConfig {
    return this.config;
  }

  /** The requestheader CA and client CA as one PEM bundle, for the TLS server's `ca` ('' when there are none). */
  caBundle(): string {
    return this.bundle;
  }

  /**
   * Called after every effective change with the new settings and CA bundle; a server passes the bundle to
   * `setSecureContext`. Returns the unsubscribe function.
   */
  onChange(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Start watching; resolves once the first read is done (with the ConfigMap or without it), rejects if `signal`
   * aborts first. The watch runs until `signal` aborts.
   */
  async start(signal: AbortSignal): Promise<void> {
    void this.informer.start(signal);
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => reject(new Error(`${this.where}: stopped before the first read`));
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      void this.informer.synced().then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
    });
    if (this.informer.size === 0)
      this.log.warn(
        `${this.where} does not exist: no front-proxy and no client certificate is trusted until it does (kube-apiserver writes it when started with --requestheader-client-ca-file or --client-ca-file)`,
      );
  }

  private apply(data: Record<string, string> | undefined): void {
    const key = data === undefined ? undefined : JSON.stringify(Object.entries(data).sort());
    if (key === this.appliedData && this.config.generation > 0) return;
    let settings: AuthenticationSettings;
    try {
      settings = parseAuthenticationConfigMap(data);
    } catch (err) {
      this.log.error({ err }, `${this.where} is invalid; keeping the settings in force: ${errorMessage(err)}`);
      return;
    }
    if (data === undefined) this.log.warn(`${this.where} was deleted; trusting no front proxy or client CA`);
    this.appliedData = key;
    this.config = { ...settings, generation: this.config.generation + 1 };
    this.bundle = caBundleOf(settings);
    this.log.info(
      {
        generation: this.config.generation,
        requestHeaderCas: settings.requestHeader?.roots.length ?? 0,
        allowedNames: settings.requestHeader?.allowedNames,
        clientCas: settings.clientCa?.roots.length ?? 0,
      },
      'authentication settings loaded',
    );
    for (const l of this.listeners) {
      try {
        l(this.config, this.bundle);
      } catch (err) {
        this.log.error({ err }, 'authentication settings listener threw');
      }
    }
  }
}

/** Settings that never change (a static setup, or tests). */
export function fixedAuthenticationConfig(settings: AuthenticationSettings): AuthenticationConfigProvider {
  return { current: { ...settings, generation: 1 } };
}
