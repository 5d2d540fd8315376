/**
 * Who may use a sandbox's envd and its other ports: the rule lives in src/api/envd-access.ts, shared with
 * sandbox-apiserver's router (which must not resume a paused sandbox for a request envd would refuse). Summary:
 * envd needs `X-Access-Token` (or, for `/files`, a valid unexpired v1 signature); other ports are open when the
 * sandbox was created through the e2b API with public traffic, else need the envd or the traffic access token.
 */
export { hasAccessToken, mayReachPort, signatureProblem } from '../../api/envd-access.js';

// One formula for envd and for sandbox-apiserver's router (which finds the sandbox a signed URL is for).
export { fileSignature } from '../../api/envd.js';
