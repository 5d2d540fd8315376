// Importing this module registers every controller with build.ts (one line per controller module).
import './sandbox/index.js';
import './extensions/template-controller.js';
import './extensions/warm-pool-controller.js';
import './extensions/claim-controller.js';
