// Importing this module registers every controller with build.ts (one line per controller module).
export {};
