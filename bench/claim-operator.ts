/**
 * The operator entry point used by bench/claim*.ts and the exclusivity test when they run the operator as a child
 * process (so it can be SIGKILLed). Same as bin/sandbox-operator.mjs, plus an explicit import of the Sandbox
 * controller so the child has it whether or not src/operator/controllers.ts lists it yet.
 */
import '../src/operator/sandbox/index.js';
import '../src/operator/main.js';
