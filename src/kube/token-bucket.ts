import { setTimeout as sleep } from 'node:timers/promises';

/** Client-side QPS/burst limiting, as client-go's flowcontrol token bucket does. */
export class TokenBucket {
  private tokens: number;
  private last = performance.now();

  constructor(
    private readonly ratePerSec: number,
    private readonly burst: number,
  ) {
    this.tokens = burst;
  }

  async take(): Promise<void> {
    for (;;) {
      const now = performance.now();
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.ratePerSec);
      this.last = now;
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      await sleep(Math.ceil(((1 - this.tokens) / this.ratePerSec) * 1000));
    }
  }
}
