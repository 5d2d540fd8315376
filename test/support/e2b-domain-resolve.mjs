/**
 * A `--import` preload for the e2b SDK process of test/aggregated/e2b-domain.test.ts: names under
 * SBX_RESOLVE_SUFFIX resolve to SBX_RESOLVE_ADDRESS, as the deployment's wildcard DNS record `*.<domain>` would
 * make them; every other name resolves as before. Only name resolution changes: the SDK builds its URLs, connects
 * (port 443) and checks the certificate (the test CA in NODE_EXTRA_CA_CERTS) itself. Node's fetch, which the SDK
 * uses, reaches names through net's dns.lookup, so the module's property is what is replaced. Each name resolved
 * this way is appended to SBX_RESOLVE_LOG, so the test sees which hosts the SDK itself built.
 */
import dns from 'node:dns';
import { appendFileSync } from 'node:fs';
import process from 'node:process';

const suffix = `.${process.env.SBX_RESOLVE_SUFFIX}`.toLowerCase();
const address = process.env.SBX_RESOLVE_ADDRESS;
const log = process.env.SBX_RESOLVE_LOG;
const systemLookup = dns.lookup;

dns.lookup = function lookup(hostname, options, callback) {
  if (typeof options === 'function') {
    callback = options;
    options = {};
  }
  if (typeof hostname !== 'string' || !hostname.toLowerCase().endsWith(suffix))
    return systemLookup.call(dns, hostname, options, callback);
  if (log) appendFileSync(log, `${hostname}\n`);
  const all = typeof options === 'object' && options !== null && options.all;
  process.nextTick(() => (all ? callback(null, [{ address, family: 4 }]) : callback(null, address, 4)));
  return {};
};
