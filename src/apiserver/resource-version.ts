/**
 * resourceVersions this server issues: a decimal of `boot << 32 | n`, where `boot` is the server's start time in
 * seconds and `n` counts the changes it has applied since. Clients treat them as opaque; the server can tell its
 * own from another incarnation's (or another replica's), which it cannot resume a watch from and answers 410, so
 * clients relist instead of silently missing events.
 */
export class ResourceVersions {
  readonly boot: bigint;
  private n = 0n;

  constructor(bootSeconds = Math.floor(Date.now() / 1000)) {
    this.boot = BigInt(bootSeconds);
  }

  /** The current version (of the last applied change; the boot version before any). */
  get current(): bigint {
    return (this.boot << 32n) | this.n;
  }

  next(): bigint {
    this.n++;
    return this.current;
  }

  /** The counter of an RV this incarnation issued; undefined for anything else (unparsable, other boot). */
  counterOf(rv: string): bigint | undefined {
    if (!/^\d{1,20}$/.test(rv)) return undefined;
    const v = BigInt(rv);
    if (v >> 32n !== this.boot) return undefined;
    return v & 0xffffffffn;
  }

  get counter(): bigint {
    return this.n;
  }
}
