#!/usr/bin/env node
// Runs the TypeScript CLI directly (tsx) so `npx sbx` works right after `npm ci`, without a build step.
import { register } from 'tsx/esm/api';
register();
await import('../src/cli/main.ts');
