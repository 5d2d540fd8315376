/**
 * The FNV-1a 32-bit hash of the label values (docs/api.md "Well-known keys"): over the UTF-8 bytes of the input,
 * rendered as exactly 8 lower-case hex digits. Label values such as `agents.x-k8s.io/sandbox-name-hash` are built with
 * it, so the output must match the Go operator byte for byte (vectors in test/api/hash.test.ts).
 */
const OFFSET_BASIS = 0x811c9dc5;
const PRIME = 0x01000193;
const encoder = new TextEncoder();

export function fnv1a32(input: string): string {
  let h = OFFSET_BASIS;
  for (const byte of encoder.encode(input)) {
    h ^= byte;
    h = Math.imul(h, PRIME) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}
